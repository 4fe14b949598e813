"""inspect-ai: its preset (data only; its rules are declared, so it has no schema file)."""

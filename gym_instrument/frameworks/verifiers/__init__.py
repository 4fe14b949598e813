"""verifiers: its preset and its schema."""

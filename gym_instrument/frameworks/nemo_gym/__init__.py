"""NeMo Gym: its preset and its schema."""

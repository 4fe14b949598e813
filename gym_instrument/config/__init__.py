"""Config: every setting declared once (``settings``: argument > environment > default), and the
declarative form's parser (``declare``): targets, rules and presets as data."""

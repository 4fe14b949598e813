"""Reliability and security: bad input, faults, load, processes and leaks, observed as a user would."""

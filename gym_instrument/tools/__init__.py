"""What a person runs on a finished run: ``report`` (a run's spans summarised), ``replay`` (spans
from a past run's files) and the ``gym-instrument`` command. They reuse the layers below; no
second engine."""

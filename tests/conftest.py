"""Settings shared by every test: Hypothesis without per-example deadlines.

The suite runs on 2 shared cores next to real node processes and Spark, where one example can
take seconds for reasons that have nothing to do with the code under test; a deadline there
fails a property by the clock, not by its outcome (STYLE.md: no timed assertions)."""

from hypothesis import settings

settings.register_profile("ringflow", deadline=None)
settings.load_profile("ringflow")

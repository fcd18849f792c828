"""Settings shared by every test: Hypothesis without per-example deadlines and without the
"too slow" health check.

The suite runs on 2 shared cores next to real node processes and Spark, where one example can
take seconds for reasons that have nothing to do with the code under test; a deadline there
fails a property by the clock, not by its outcome (STYLE.md: no timed assertions). The same
holds for the health check on how long examples take to generate: the stateful store machine
failed once at load ~10 with nothing in Hypothesis' database to replay (a health check is not a
falsifying example), and passed on every rerun."""

from hypothesis import HealthCheck, settings

settings.register_profile("ringflow", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ringflow")

"""``spark-submit`` entry of the replication job: ``ringflow replicate`` with the same options.

spark-submit runs a Python file, not a console script; this is that file::

    spark-submit --master spark://host:7077 --conf spark.driver.host=ADDRESS \\
        "$(python -c 'import ringflow.cli.replicate_job as job; print(job.__file__)')" \\
        --source 10.0.0.1 --table ks.t --to parquet:/shared/lake --checkpoint /shared/ckpt

The job uses the session spark-submit configured: its master, ``--conf`` settings and
``spark-defaults.conf`` win over ringflow's defaults (:mod:`ringflow.pipeline._spark_conf`);
``--conf`` and ``--driver-host`` given after the file win over those. ``python -m
ringflow.cli.replicate_job ...`` runs it the same way without spark-submit. The exit code is the
command's (2 for a bad option or destination, 1 for a failed channel).
"""

from __future__ import annotations

import sys

from ringflow.cli import main


def run(argv: list[str]) -> int:
    """``ringflow replicate`` with ``argv`` (everything after the file name)."""
    return main(["replicate", *argv])


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))

"""Rows held in the driver, in and out of Spark with no Spark job: Arrow <-> a ``LocalRelation``.

Spark plans a ``LocalRelation`` (rows the driver holds) like any other source, and its optimizer
(``ConvertToLocalRelation``) evaluates the projections and filters over it in the driver, into
another ``LocalRelation``: no task, no job. ``local_frame`` hands Arrow rows to Spark that way
(Spark's own ``ArrowConverters.toDataFrame``, which PySpark's ``createDataFrame`` from pandas uses
below ``spark.sql.execution.arrow.localRelationThreshold``; pandas is not needed), and
``local_arrow`` takes the rows of such a plan back as Arrow, the way Spark Connect returns a local
result (``ArrowConverters.toBatchWithSchemaIterator``), or says it cannot (a plan with a join or
an aggregate needs a job: the caller runs one).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger("cdclake")

# Arrow batches of at most this many rows and bytes (one batch for any batch the driver path takes).
_BATCH_ROWS = 1 << 20
_BATCH_BYTES = 1 << 40


def _converters(spark: SparkSession) -> Any:
    """Spark's ``ArrowConverters`` object (its methods are ``private[sql]``: no static forwarders)."""
    package = spark._jvm.org.apache.spark.sql.execution.arrow  # type: ignore[union-attr]
    return getattr(getattr(package, "ArrowConverters$"), "MODULE$")


def local_frame(spark: SparkSession, rows: pa.Table, schema: StructType) -> DataFrame | None:
    """``rows`` as a DataFrame of ``schema`` over a ``LocalRelation`` (Arrow's types as Spark maps
    them: ``schema`` must be what ``rows`` converts to). One call into the JVM per Arrow batch.
    None if Spark refuses them (its converters are internal: a Spark without them, too)."""
    from py4j.protocol import Py4JError
    from pyspark.sql import DataFrame

    jvm = spark._jvm
    assert jvm is not None
    batches = jvm.java.util.ArrayList()
    for batch in rows.combine_chunks().to_batches(max_chunksize=_BATCH_ROWS) or []:
        batches.add(bytearray(batch.serialize().to_pybytes()))
    iterator = jvm.scala.collection.JavaConverters.asScalaIteratorConverter(batches.iterator()).asScala()
    try:
        return DataFrame(_converters(spark).toDataFrame(iterator, schema.json(), spark._jsparkSession), spark)
    except Py4JError as refused:
        log.debug("rows not handed to Spark as a local relation: %s", str(refused).splitlines()[0])
        return None


def local_arrow(frame: DataFrame) -> pa.Table | None:
    """``frame``'s rows as Arrow when Spark's optimizer made its plan one ``LocalRelation`` (the
    driver computed them: no job); None otherwise, or when evaluating them failed (a job that
    evaluates them says why)."""
    import pyarrow as pa
    from py4j.protocol import Py4JError

    spark = frame.sparkSession
    tables = []
    try:
        plan = frame._jdf.queryExecution().optimizedPlan()
        if plan.getClass().getSimpleName() != "LocalRelation":
            return None
        zone = spark.conf.get("spark.sql.session.timeZone")
        batches = _converters(spark).toBatchWithSchemaIterator(
            plan.data().iterator(), frame._jdf.schema(), _BATCH_ROWS, _BATCH_BYTES, zone, False
        )
        while batches.hasNext():
            tables.append(pa.ipc.open_stream(bytes(batches.next())).read_all())
    except Py4JError as failed:
        log.debug("rows not evaluated in the driver: %s", str(failed).splitlines()[0])
        return None
    if not tables:
        from pyspark.sql.pandas.types import to_arrow_schema

        return to_arrow_schema(frame.schema).empty_table()
    return pa.concat_tables(tables)

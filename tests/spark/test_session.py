"""The warm session: created once per process, reused, with small-machine defaults."""

from workers.spark.session import get_session


def test_get_session_returns_the_one_warm_session_with_small_defaults(spark):
    assert get_session("local[2]") is spark
    # a later caller asking for another master still gets the running session
    assert get_session("local[4]", conf={"spark.sql.shuffle.partitions": "99"}) is spark
    assert spark.sparkContext.master == "local[2]"
    assert spark.conf.get("spark.sql.shuffle.partitions") == "4"
    assert spark.conf.get("spark.ui.enabled") == "false"
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    assert spark.range(3).count() == 3

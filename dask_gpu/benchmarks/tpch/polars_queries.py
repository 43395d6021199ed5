"""The 22 TPC-H queries in Polars' lazy API, written from the specification with DuckDB's substitution parameters:
``qN(t)`` takes the tables (``t.scan(name)``, a LazyFrame of a table's parquet files; ``t.scale``) and returns a
LazyFrame, uncollected, so that one plan runs on Polars' CPU engine and on cudf-polars' GPU engine. Its columns and
rows come in the order of DuckDB's answer. Pointwise work happens outside group-by aggregations and nothing uses
window functions or Python callbacks, which cudf-polars does not run.
"""

from __future__ import annotations

from datetime import datetime

import polars as pl

col = pl.col


def _revenue() -> pl.Expr:
    return col("l_extendedprice") * (1 - col("l_discount"))


def _nations_of(t, region: str) -> pl.LazyFrame:
    """The nations of one region: ``n_nationkey``, ``n_name``."""
    regions = t.scan("region").filter(col("r_name") == region).select("r_regionkey")
    return (t.scan("nation").join(regions, left_on="n_regionkey", right_on="r_regionkey", how="semi")
            .select("n_nationkey", "n_name"))


def q1(t) -> pl.LazyFrame:
    return (
        t.scan("lineitem")
        .filter(col("l_shipdate") <= datetime(1998, 9, 2))
        .select("l_returnflag", "l_linestatus", "l_quantity", "l_extendedprice", "l_discount",
                _revenue().alias("disc_price"), (_revenue() * (1 + col("l_tax"))).alias("charge"))
        .group_by("l_returnflag", "l_linestatus")
        .agg(
            col("l_quantity").sum().alias("sum_qty"),
            col("l_extendedprice").sum().alias("sum_base_price"),
            col("disc_price").sum().alias("sum_disc_price"),
            col("charge").sum().alias("sum_charge"),
            col("l_quantity").mean().alias("avg_qty"),
            col("l_extendedprice").mean().alias("avg_price"),
            col("l_discount").mean().alias("avg_disc"),
            pl.len().alias("count_order"),
        )
        .sort("l_returnflag", "l_linestatus")
    )


def q2(t) -> pl.LazyFrame:
    parts = (t.scan("part").filter((col("p_size") == 15) & col("p_type").str.ends_with("BRASS"))
             .select("p_partkey", "p_mfgr"))
    suppliers = (t.scan("supplier")
                 .join(_nations_of(t, "EUROPE"), left_on="s_nationkey", right_on="n_nationkey")
                 .select("s_suppkey", "s_acctbal", "s_name", "n_name", "s_address", "s_phone", "s_comment"))
    offers = (t.scan("partsupp").select("ps_partkey", "ps_suppkey", "ps_supplycost")
              .join(parts, left_on="ps_partkey", right_on="p_partkey")
              .join(suppliers, left_on="ps_suppkey", right_on="s_suppkey"))
    cheapest = offers.group_by("ps_partkey").agg(col("ps_supplycost").min().alias("min_cost"))
    return (
        offers.join(cheapest, on="ps_partkey")
        .filter(col("ps_supplycost") == col("min_cost"))
        .select("s_acctbal", "s_name", "n_name", "ps_partkey", "p_mfgr", "s_address", "s_phone", "s_comment")
        .sort(["s_acctbal", "n_name", "s_name", "ps_partkey"], descending=[True, False, False, False])
        .head(100)
    )


def q3(t) -> pl.LazyFrame:
    day = datetime(1995, 3, 15)
    customers = t.scan("customer").filter(col("c_mktsegment") == "BUILDING").select("c_custkey")
    orders = (t.scan("orders").filter(col("o_orderdate") < day)
              .join(customers, left_on="o_custkey", right_on="c_custkey", how="semi")
              .select("o_orderkey", "o_orderdate", "o_shippriority"))
    return (
        t.scan("lineitem").filter(col("l_shipdate") > day)
        .select("l_orderkey", _revenue().alias("revenue"))
        .join(orders, left_on="l_orderkey", right_on="o_orderkey")
        .group_by("l_orderkey", "o_orderdate", "o_shippriority")
        .agg(col("revenue").sum())
        .select("l_orderkey", "revenue", "o_orderdate", "o_shippriority")
        .sort(["revenue", "o_orderdate"], descending=[True, False])
        .head(10)
    )


def q4(t) -> pl.LazyFrame:
    late = t.scan("lineitem").filter(col("l_commitdate") < col("l_receiptdate")).select("l_orderkey")
    return (
        t.scan("orders")
        .filter((col("o_orderdate") >= datetime(1993, 7, 1)) & (col("o_orderdate") < datetime(1993, 10, 1)))
        .select("o_orderkey", "o_orderpriority")
        .join(late, left_on="o_orderkey", right_on="l_orderkey", how="semi")
        .group_by("o_orderpriority")
        .agg(pl.len().alias("order_count"))
        .sort("o_orderpriority")
    )


def q5(t) -> pl.LazyFrame:
    nations = _nations_of(t, "ASIA")
    customers = (t.scan("customer").select("c_custkey", "c_nationkey")
                 .join(nations, left_on="c_nationkey", right_on="n_nationkey", how="semi"))
    orders = (t.scan("orders")
              .filter((col("o_orderdate") >= datetime(1994, 1, 1)) & (col("o_orderdate") < datetime(1995, 1, 1)))
              .select("o_orderkey", "o_custkey")
              .join(customers, left_on="o_custkey", right_on="c_custkey")
              .select("o_orderkey", "c_nationkey"))
    suppliers = t.scan("supplier").select("s_suppkey", "s_nationkey")
    return (
        t.scan("lineitem").select("l_orderkey", "l_suppkey", _revenue().alias("revenue"))
        .join(orders, left_on="l_orderkey", right_on="o_orderkey")
        .join(suppliers, left_on=["l_suppkey", "c_nationkey"], right_on=["s_suppkey", "s_nationkey"])
        .group_by("c_nationkey")
        .agg(col("revenue").sum())
        .join(nations, left_on="c_nationkey", right_on="n_nationkey")
        .select("n_name", "revenue")
        .sort("revenue", descending=True)
    )


def q6(t) -> pl.LazyFrame:
    return (
        t.scan("lineitem")
        .filter((col("l_shipdate") >= datetime(1994, 1, 1)) & (col("l_shipdate") < datetime(1995, 1, 1))
                & (col("l_discount") >= 0.05) & (col("l_discount") <= 0.07) & (col("l_quantity") < 24))
        .select((col("l_extendedprice") * col("l_discount")).sum().alias("revenue"))
    )


def q7(t) -> pl.LazyFrame:
    pair = ["FRANCE", "GERMANY"]
    nations = t.scan("nation").filter(col("n_name").is_in(pair)).select("n_nationkey", "n_name")
    suppliers = (t.scan("supplier").select("s_suppkey", "s_nationkey")
                 .join(nations, left_on="s_nationkey", right_on="n_nationkey")
                 .select("s_suppkey", col("n_name").alias("supp_nation")))
    customers = (t.scan("customer").select("c_custkey", "c_nationkey")
                 .join(nations, left_on="c_nationkey", right_on="n_nationkey")
                 .select("c_custkey", col("n_name").alias("cust_nation")))
    orders = (t.scan("orders").select("o_orderkey", "o_custkey")
              .join(customers, left_on="o_custkey", right_on="c_custkey")
              .select("o_orderkey", "cust_nation"))
    return (
        t.scan("lineitem")
        .filter((col("l_shipdate") >= datetime(1995, 1, 1)) & (col("l_shipdate") <= datetime(1996, 12, 31)))
        .select("l_orderkey", "l_suppkey", col("l_shipdate").dt.year().alias("l_year"), _revenue().alias("volume"))
        .join(suppliers, left_on="l_suppkey", right_on="s_suppkey")
        .join(orders, left_on="l_orderkey", right_on="o_orderkey")
        .filter(col("supp_nation") != col("cust_nation"))  # both are France or Germany: one of each
        .group_by("supp_nation", "cust_nation", "l_year")
        .agg(col("volume").sum().alias("revenue"))
        .sort("supp_nation", "cust_nation", "l_year")
    )


def q8(t) -> pl.LazyFrame:
    parts = t.scan("part").filter(col("p_type") == "ECONOMY ANODIZED STEEL").select("p_partkey")
    customers = (t.scan("customer").select("c_custkey", "c_nationkey")
                 .join(_nations_of(t, "AMERICA"), left_on="c_nationkey", right_on="n_nationkey", how="semi"))
    orders = (t.scan("orders")
              .filter((col("o_orderdate") >= datetime(1995, 1, 1)) & (col("o_orderdate") <= datetime(1996, 12, 31)))
              .join(customers, left_on="o_custkey", right_on="c_custkey", how="semi")
              .select("o_orderkey", col("o_orderdate").dt.year().alias("o_year")))
    suppliers = (t.scan("supplier").select("s_suppkey", "s_nationkey")
                 .join(t.scan("nation").select("n_nationkey", "n_name"), left_on="s_nationkey", right_on="n_nationkey")
                 .select("s_suppkey", "n_name"))
    volume = col("volume")
    return (
        t.scan("lineitem").select("l_orderkey", "l_partkey", "l_suppkey", _revenue().alias("volume"))
        .join(parts, left_on="l_partkey", right_on="p_partkey", how="semi")
        .join(orders, left_on="l_orderkey", right_on="o_orderkey")
        .join(suppliers, left_on="l_suppkey", right_on="s_suppkey")
        .select("o_year", volume, pl.when(col("n_name") == "BRAZIL").then(volume).otherwise(0.0).alias("brazil"))
        .group_by("o_year")
        .agg(col("brazil").sum(), volume.sum())
        .select("o_year", (col("brazil") / volume).alias("mkt_share"))
        .sort("o_year")
    )


def q9(t) -> pl.LazyFrame:
    parts = t.scan("part").filter(col("p_name").str.contains("green", literal=True)).select("p_partkey")
    suppliers = (t.scan("supplier").select("s_suppkey", "s_nationkey")
                 .join(t.scan("nation").select("n_nationkey", "n_name"), left_on="s_nationkey", right_on="n_nationkey")
                 .select("s_suppkey", "n_name"))
    partsupp = t.scan("partsupp").select("ps_partkey", "ps_suppkey", "ps_supplycost")
    orders = t.scan("orders").select("o_orderkey", col("o_orderdate").dt.year().alias("o_year"))
    return (
        t.scan("lineitem")
        .select("l_orderkey", "l_partkey", "l_suppkey", "l_quantity", "l_extendedprice", "l_discount")
        .join(parts, left_on="l_partkey", right_on="p_partkey", how="semi")
        .join(partsupp, left_on=["l_partkey", "l_suppkey"], right_on=["ps_partkey", "ps_suppkey"])
        .join(suppliers, left_on="l_suppkey", right_on="s_suppkey")
        .join(orders, left_on="l_orderkey", right_on="o_orderkey")
        .select(col("n_name").alias("nation"), "o_year",
                (_revenue() - col("ps_supplycost") * col("l_quantity")).alias("amount"))
        .group_by("nation", "o_year")
        .agg(col("amount").sum().alias("sum_profit"))
        .sort(["nation", "o_year"], descending=[False, True])
    )


def q10(t) -> pl.LazyFrame:
    orders = (t.scan("orders")
              .filter((col("o_orderdate") >= datetime(1993, 10, 1)) & (col("o_orderdate") < datetime(1994, 1, 1)))
              .select("o_orderkey", "o_custkey"))
    revenue = (t.scan("lineitem").filter(col("l_returnflag") == "R")
               .select("l_orderkey", _revenue().alias("revenue"))
               .join(orders, left_on="l_orderkey", right_on="o_orderkey")
               .group_by("o_custkey")
               .agg(col("revenue").sum()))
    return (
        revenue
        .join(t.scan("customer"), left_on="o_custkey", right_on="c_custkey")
        .join(t.scan("nation").select("n_nationkey", "n_name"), left_on="c_nationkey", right_on="n_nationkey")
        .select("o_custkey", "c_name", "revenue", "c_acctbal", "n_name", "c_address", "c_phone", "c_comment")
        .sort("revenue", descending=True)
        .head(20)
    )


def q11(t) -> pl.LazyFrame:
    fraction = 0.0001 / t.scale
    nations = t.scan("nation").filter(col("n_name") == "GERMANY").select("n_nationkey")
    suppliers = (t.scan("supplier").select("s_suppkey", "s_nationkey")
                 .join(nations, left_on="s_nationkey", right_on="n_nationkey", how="semi"))
    return (
        t.scan("partsupp")
        .join(suppliers, left_on="ps_suppkey", right_on="s_suppkey", how="semi")
        .select("ps_partkey", (col("ps_supplycost") * col("ps_availqty")).alias("value"))
        .group_by("ps_partkey")
        .agg(col("value").sum())
        .filter(col("value") > col("value").sum() * fraction)  # the parts' values add up to the nation's
        .sort("value", descending=True)
    )


def q12(t) -> pl.LazyFrame:
    high = col("o_orderpriority").is_in(["1-URGENT", "2-HIGH"]).cast(pl.Int64)
    lines = (t.scan("lineitem")
             .filter(col("l_shipmode").is_in(["MAIL", "SHIP"])
                     & (col("l_commitdate") < col("l_receiptdate")) & (col("l_shipdate") < col("l_commitdate"))
                     & (col("l_receiptdate") >= datetime(1994, 1, 1)) & (col("l_receiptdate") < datetime(1995, 1, 1)))
             .select("l_orderkey", "l_shipmode"))
    return (
        lines.join(t.scan("orders").select("o_orderkey", "o_orderpriority"), left_on="l_orderkey",
                   right_on="o_orderkey")
        .select("l_shipmode", high.alias("high_line_count"), (1 - high).alias("low_line_count"))
        .group_by("l_shipmode")
        .agg(col("high_line_count").sum(), col("low_line_count").sum())
        .sort("l_shipmode")
    )


def q13(t) -> pl.LazyFrame:
    counts = (t.scan("orders").filter(~col("o_comment").str.contains("special.*requests"))
              .group_by("o_custkey").agg(pl.len().alias("c_count")))
    return (
        t.scan("customer").select("c_custkey")
        .join(counts, left_on="c_custkey", right_on="o_custkey", how="left")
        .select(col("c_count").fill_null(0))  # customers without orders have none
        .group_by("c_count")
        .agg(pl.len().alias("custdist"))
        .sort(["custdist", "c_count"], descending=[True, True])
    )


def q14(t) -> pl.LazyFrame:
    revenue = col("revenue")
    return (
        t.scan("lineitem")
        .filter((col("l_shipdate") >= datetime(1995, 9, 1)) & (col("l_shipdate") < datetime(1995, 10, 1)))
        .select("l_partkey", _revenue().alias("revenue"))
        .join(t.scan("part").select("p_partkey", "p_type"), left_on="l_partkey", right_on="p_partkey")
        .select(revenue, pl.when(col("p_type").str.starts_with("PROMO")).then(revenue).otherwise(0.0).alias("promo"))
        .select((100.0 * col("promo").sum() / revenue.sum()).alias("promo_revenue"))
    )


def q15(t) -> pl.LazyFrame:
    revenue = (t.scan("lineitem")
               .filter((col("l_shipdate") >= datetime(1996, 1, 1)) & (col("l_shipdate") < datetime(1996, 4, 1)))
               .select("l_suppkey", _revenue().alias("total_revenue"))
               .group_by("l_suppkey")
               .agg(col("total_revenue").sum()))
    top = revenue.filter(col("total_revenue") == col("total_revenue").max())
    return (
        t.scan("supplier").select("s_suppkey", "s_name", "s_address", "s_phone")
        .join(top, left_on="s_suppkey", right_on="l_suppkey")
        .sort("s_suppkey")
    )


def q16(t) -> pl.LazyFrame:
    complaints = (t.scan("supplier").filter(col("s_comment").str.contains("Customer.*Complaints"))
                  .select("s_suppkey"))
    parts = (t.scan("part")
             .filter((col("p_brand") != "Brand#45") & ~col("p_type").str.starts_with("MEDIUM POLISHED")
                     & col("p_size").is_in([49, 14, 23, 45, 19, 3, 36, 9]))
             .select("p_partkey", "p_brand", "p_type", "p_size"))
    return (
        t.scan("partsupp").select("ps_partkey", "ps_suppkey")
        .join(parts, left_on="ps_partkey", right_on="p_partkey")
        .join(complaints, left_on="ps_suppkey", right_on="s_suppkey", how="anti")
        .group_by("p_brand", "p_type", "p_size")
        .agg(col("ps_suppkey").n_unique().alias("supplier_cnt"))
        .sort(["supplier_cnt", "p_brand", "p_type", "p_size"], descending=[True, False, False, False])
    )


def q17(t) -> pl.LazyFrame:
    parts = (t.scan("part").filter((col("p_brand") == "Brand#23") & (col("p_container") == "MED BOX"))
             .select("p_partkey"))
    lines = (t.scan("lineitem").select("l_partkey", "l_quantity", "l_extendedprice")
             .join(parts, left_on="l_partkey", right_on="p_partkey", how="semi"))
    limits = lines.group_by("l_partkey").agg((0.2 * col("l_quantity").mean()).alias("limit"))
    return (
        lines.join(limits, on="l_partkey")
        .filter(col("l_quantity") < col("limit"))
        .select((col("l_extendedprice").sum() / 7.0).alias("avg_yearly"))
    )


def q18(t) -> pl.LazyFrame:
    big = (t.scan("lineitem").group_by("l_orderkey")
           .agg(col("l_quantity").sum().alias("sum_qty"))
           .filter(col("sum_qty") > 300))
    return (
        t.scan("orders").select("o_orderkey", "o_custkey", "o_orderdate", "o_totalprice")
        .join(big, left_on="o_orderkey", right_on="l_orderkey")
        .join(t.scan("customer").select("c_custkey", "c_name"), left_on="o_custkey", right_on="c_custkey")
        .select("c_name", "o_custkey", "o_orderkey", "o_orderdate", "o_totalprice", "sum_qty")
        .sort(["o_totalprice", "o_orderdate"], descending=[True, False])
        .head(100)
    )


def q19(t) -> pl.LazyFrame:
    def case(brand: str, containers: list[str], low: int, top: int) -> pl.Expr:
        return ((col("p_brand") == brand) & col("p_container").is_in(containers)
                & (col("l_quantity") >= low) & (col("l_quantity") <= low + 10)
                & (col("p_size") >= 1) & (col("p_size") <= top))

    lines = (t.scan("lineitem")
             .filter(col("l_shipmode").is_in(["AIR", "AIR REG"]) & (col("l_shipinstruct") == "DELIVER IN PERSON")
                     & (col("l_quantity") >= 1) & (col("l_quantity") <= 30))
             .select("l_partkey", "l_quantity", _revenue().alias("revenue")))
    parts = (t.scan("part")
             .filter(col("p_brand").is_in(["Brand#12", "Brand#23", "Brand#34"])
                     & (col("p_size") >= 1) & (col("p_size") <= 15))
             .select("p_partkey", "p_brand", "p_container", "p_size"))
    return (
        lines.join(parts, left_on="l_partkey", right_on="p_partkey")
        .filter(case("Brand#12", ["SM CASE", "SM BOX", "SM PACK", "SM PKG"], 1, 5)
                | case("Brand#23", ["MED BAG", "MED BOX", "MED PKG", "MED PACK"], 10, 10)
                | case("Brand#34", ["LG CASE", "LG BOX", "LG PACK", "LG PKG"], 20, 15))
        .select(col("revenue").sum())
    )


def q20(t) -> pl.LazyFrame:
    parts = t.scan("part").filter(col("p_name").str.starts_with("forest")).select("p_partkey")
    shipped = (t.scan("lineitem")
               .filter((col("l_shipdate") >= datetime(1994, 1, 1)) & (col("l_shipdate") < datetime(1995, 1, 1)))
               .select("l_partkey", "l_suppkey", "l_quantity")
               .join(parts, left_on="l_partkey", right_on="p_partkey", how="semi")
               .group_by("l_partkey", "l_suppkey")
               .agg((0.5 * col("l_quantity").sum()).alias("half")))
    suppliers = (t.scan("partsupp").select("ps_partkey", "ps_suppkey", "ps_availqty")
                 .join(parts, left_on="ps_partkey", right_on="p_partkey", how="semi")
                 .join(shipped, left_on=["ps_partkey", "ps_suppkey"], right_on=["l_partkey", "l_suppkey"])
                 .filter(col("ps_availqty") > col("half"))
                 .select("ps_suppkey"))
    nations = t.scan("nation").filter(col("n_name") == "CANADA").select("n_nationkey")
    return (
        t.scan("supplier").select("s_suppkey", "s_name", "s_address", "s_nationkey")
        .join(nations, left_on="s_nationkey", right_on="n_nationkey", how="semi")
        .join(suppliers, left_on="s_suppkey", right_on="ps_suppkey", how="semi")
        .select("s_name", "s_address")
        .sort("s_name")
    )


def q21(t) -> pl.LazyFrame:
    lineitem = t.scan("lineitem").select("l_orderkey", "l_suppkey", "l_commitdate", "l_receiptdate")
    late = lineitem.filter(col("l_receiptdate") > col("l_commitdate")).select("l_orderkey", "l_suppkey")
    nations = t.scan("nation").filter(col("n_name") == "SAUDI ARABIA").select("n_nationkey")
    suppliers = (t.scan("supplier").select("s_suppkey", "s_name", "s_nationkey")
                 .join(nations, left_on="s_nationkey", right_on="n_nationkey", how="semi")
                 .select("s_suppkey", "s_name"))
    orders = t.scan("orders").filter(col("o_orderstatus") == "F").select("o_orderkey")
    waiting = (late.join(suppliers, left_on="l_suppkey", right_on="s_suppkey")
               .join(orders, left_on="l_orderkey", right_on="o_orderkey", how="semi"))
    candidates = waiting.select("l_orderkey").unique()

    def span(lines: pl.LazyFrame) -> pl.LazyFrame:  # the lowest and highest supplier of each candidate order
        return (lines.join(candidates, on="l_orderkey", how="semi").group_by("l_orderkey")
                .agg(col("l_suppkey").min().alias("low"), col("l_suppkey").max().alias("high")))

    # EXISTS another supplier on the order: the order has more than one supplier
    shared = span(lineitem).filter(col("low") != col("high")).select("l_orderkey")
    # NOT EXISTS another supplier late on it: the late line's supplier is the order's only late one
    alone = span(late).filter(col("low") == col("high")).select("l_orderkey")
    return (
        waiting.join(shared, on="l_orderkey", how="semi")
        .join(alone, on="l_orderkey", how="semi")
        .group_by("s_name")
        .agg(pl.len().alias("numwait"))
        .sort(["numwait", "s_name"], descending=[True, False])
        .head(100)
    )


def q22(t) -> pl.LazyFrame:
    codes = ["13", "31", "23", "29", "30", "18", "17"]
    # the average of the positive balances is positive, so a customer above it has a positive balance too:
    # filtering on the positive ones first leaves the average and the answer as they are
    customers = (t.scan("customer")
                 .select("c_custkey", col("c_phone").str.slice(0, 2).alias("cntrycode"), "c_acctbal")
                 .filter(col("cntrycode").is_in(codes) & (col("c_acctbal") > 0.0))
                 .filter(col("c_acctbal") > col("c_acctbal").mean()))
    return (
        customers.join(t.scan("orders").select("o_custkey"), left_on="c_custkey", right_on="o_custkey", how="anti")
        .group_by("cntrycode")
        .agg(pl.len().alias("numcust"), col("c_acctbal").sum().alias("totacctbal"))
        .sort("cntrycode")
    )


QUERIES = {1: q1, 2: q2, 3: q3, 4: q4, 5: q5, 6: q6, 7: q7, 8: q8, 9: q9, 10: q10, 11: q11, 12: q12, 13: q13,
           14: q14, 15: q15, 16: q16, 17: q17, 18: q18, 19: q19, 20: q20, 21: q21, 22: q22}

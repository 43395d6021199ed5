"""The 22 TPC-H queries for Dask DataFrame, written from the specification with DuckDB's substitution parameters:
``qN(t)`` reads tables with ``t.read(name)`` and returns a lazy collection with the columns and row order of the
query's SELECT and ORDER BY (``QUERIES`` maps N to it). They are written as a pandas user writes them: merges,
filters, group-bys and sorts, with no engine hints (no broadcast or split-out keywords, repartitions or persists):
the engine decides how to join, reduce and sort. Only APIs that cuDF has too are used, so the same code runs on
pandas and on cuDF partitions. A LIMIT is ``head(n, compute=False)``, which keeps the collection lazy.
"""

from __future__ import annotations

import pandas as pd


def _revenue(df):
    return df.l_extendedprice * (1 - df.l_discount)


def _nations(t, region: str):
    """The nations of ``region`` (all of the nation table's columns, and the region's)."""
    r = t.read("region")
    return t.read("nation").merge(r[r.r_name == region], left_on="n_regionkey", right_on="r_regionkey")


def _between(column, first: str, end: str):
    """``first <= column < end``, for dates."""
    return (column >= pd.Timestamp(first)) & (column < pd.Timestamp(end))


def q1(t):
    li = t.read("lineitem")
    li = li[li.l_shipdate <= pd.Timestamp("1998-09-02")]
    li = li.assign(disc_price=_revenue(li), avg_qty=li.l_quantity, avg_price=li.l_extendedprice)
    li = li.assign(charge=li.disc_price * (1 + li.l_tax))
    # one aggregation a column: copies for the averages
    aggs = {"l_quantity": "sum", "l_extendedprice": "sum", "disc_price": "sum", "charge": "sum", "avg_qty": "mean",
            "avg_price": "mean", "l_discount": "mean", "l_orderkey": "count"}
    g = li.groupby(["l_returnflag", "l_linestatus"]).agg(aggs).reset_index()
    return g.sort_values(["l_returnflag", "l_linestatus"])


def q2(t):
    part, supplier, ps = t.read("part"), t.read("supplier"), t.read("partsupp")
    p = part[(part.p_size == 15) & part.p_type.str.endswith("BRASS")]
    s = supplier.merge(_nations(t, "EUROPE"), left_on="s_nationkey", right_on="n_nationkey")
    j = ps.merge(p, left_on="ps_partkey", right_on="p_partkey").merge(s, left_on="ps_suppkey", right_on="s_suppkey")
    # the correlated minimum: the cheapest European offer of each part
    best = j.groupby("ps_partkey").ps_supplycost.min().reset_index()
    j = j.merge(best, on=["ps_partkey", "ps_supplycost"])
    j = j[["s_acctbal", "s_name", "n_name", "p_partkey", "p_mfgr", "s_address", "s_phone", "s_comment"]]
    return j.sort_values(["s_acctbal", "n_name", "s_name", "p_partkey"],
                         ascending=[False, True, True, True]).head(100, compute=False)


def q3(t):
    c, o, li = t.read("customer"), t.read("orders"), t.read("lineitem")
    day = pd.Timestamp("1995-03-15")
    c = c[c.c_mktsegment == "BUILDING"]
    o = o[o.o_orderdate < day]
    li = li[li.l_shipdate > day]
    j = c.merge(o, left_on="c_custkey", right_on="o_custkey").merge(li, left_on="o_orderkey", right_on="l_orderkey")
    j = j.assign(revenue=_revenue(j))
    g = j.groupby(["l_orderkey", "o_orderdate", "o_shippriority"]).revenue.sum().reset_index()
    g = g[["l_orderkey", "revenue", "o_orderdate", "o_shippriority"]]
    return g.sort_values(["revenue", "o_orderdate"], ascending=[False, True]).head(10, compute=False)


def q4(t):
    o, li = t.read("orders"), t.read("lineitem")
    o = o[_between(o.o_orderdate, "1993-07-01", "1993-10-01")]
    late = li[li.l_commitdate < li.l_receiptdate]
    # EXISTS: the orders with a late line, each once
    late = late[["l_orderkey"]].drop_duplicates()
    j = o.merge(late, left_on="o_orderkey", right_on="l_orderkey")
    g = j.groupby("o_orderpriority").o_orderkey.count().reset_index()
    return g.sort_values("o_orderpriority")


def q5(t):
    c, o, li, supplier = t.read("customer"), t.read("orders"), t.read("lineitem"), t.read("supplier")
    o = o[_between(o.o_orderdate, "1994-01-01", "1995-01-01")]
    j = c.merge(o, left_on="c_custkey", right_on="o_custkey").merge(li, left_on="o_orderkey", right_on="l_orderkey")
    # the supplier is of the customer's nation
    j = j.merge(supplier, left_on=["l_suppkey", "c_nationkey"], right_on=["s_suppkey", "s_nationkey"])
    j = j.merge(_nations(t, "ASIA"), left_on="s_nationkey", right_on="n_nationkey")
    g = j.assign(revenue=_revenue(j)).groupby("n_name").revenue.sum().reset_index()
    return g.sort_values("revenue", ascending=False)


def q6(t):
    li = t.read("lineitem")
    li = li[_between(li.l_shipdate, "1994-01-01", "1995-01-01") & (li.l_discount >= 0.05)
            & (li.l_discount <= 0.07) & (li.l_quantity < 24)]
    return (li.l_extendedprice * li.l_discount).sum()


def q7(t):
    supplier, li, o, c, n = (t.read(name) for name in ("supplier", "lineitem", "orders", "customer", "nation"))
    n1 = n[["n_nationkey", "n_name"]].rename(columns={"n_nationkey": "n1_nationkey", "n_name": "supp_nation"})
    n2 = n[["n_nationkey", "n_name"]].rename(columns={"n_nationkey": "n2_nationkey", "n_name": "cust_nation"})
    li = li[(li.l_shipdate >= pd.Timestamp("1995-01-01")) & (li.l_shipdate <= pd.Timestamp("1996-12-31"))]
    j = supplier.merge(li, left_on="s_suppkey", right_on="l_suppkey")
    j = j.merge(o, left_on="l_orderkey", right_on="o_orderkey").merge(c, left_on="o_custkey", right_on="c_custkey")
    j = j.merge(n1, left_on="s_nationkey", right_on="n1_nationkey")
    j = j.merge(n2, left_on="c_nationkey", right_on="n2_nationkey")
    j = j[((j.supp_nation == "FRANCE") & (j.cust_nation == "GERMANY"))
          | ((j.supp_nation == "GERMANY") & (j.cust_nation == "FRANCE"))]
    j = j.assign(l_year=j.l_shipdate.dt.year, volume=_revenue(j))
    g = j.groupby(["supp_nation", "cust_nation", "l_year"]).volume.sum().reset_index()
    return g.sort_values(["supp_nation", "cust_nation", "l_year"])


def q8(t):
    part, supplier, li, o, c, n = (
        t.read(name) for name in ("part", "supplier", "lineitem", "orders", "customer", "nation"))
    america = _nations(t, "AMERICA")[["n_nationkey"]]
    p = part[part.p_type == "ECONOMY ANODIZED STEEL"]
    o = o[(o.o_orderdate >= pd.Timestamp("1995-01-01")) & (o.o_orderdate <= pd.Timestamp("1996-12-31"))]
    j = p.merge(li, left_on="p_partkey", right_on="l_partkey").merge(o, left_on="l_orderkey", right_on="o_orderkey")
    j = j.merge(c, left_on="o_custkey", right_on="c_custkey")
    j = j.merge(america, left_on="c_nationkey", right_on="n_nationkey")
    j = j.merge(supplier, left_on="l_suppkey", right_on="s_suppkey")
    j = j.merge(n[["n_nationkey", "n_name"]], left_on="s_nationkey", right_on="n_nationkey")
    volume = _revenue(j)
    j = j.assign(o_year=j.o_orderdate.dt.year, volume=volume, brazil=volume.where(j.n_name == "BRAZIL", 0.0))
    g = j.groupby("o_year").agg({"brazil": "sum", "volume": "sum"}).reset_index()
    g = g.assign(mkt_share=g.brazil / g.volume)[["o_year", "mkt_share"]]
    return g.sort_values("o_year")


def q9(t):
    part, supplier, li, ps, o, n = (
        t.read(name) for name in ("part", "supplier", "lineitem", "partsupp", "orders", "nation"))
    p = part[part.p_name.str.contains("green", regex=False)]
    j = p.merge(li, left_on="p_partkey", right_on="l_partkey")
    j = j.merge(ps, left_on=["l_partkey", "l_suppkey"], right_on=["ps_partkey", "ps_suppkey"])
    j = j.merge(supplier, left_on="l_suppkey", right_on="s_suppkey")
    j = j.merge(o, left_on="l_orderkey", right_on="o_orderkey").merge(n, left_on="s_nationkey", right_on="n_nationkey")
    j = j.assign(o_year=j.o_orderdate.dt.year, amount=_revenue(j) - j.ps_supplycost * j.l_quantity)
    g = j.groupby(["n_name", "o_year"]).amount.sum().reset_index()
    return g.sort_values(["n_name", "o_year"], ascending=[True, False])


def q10(t):
    c, o, li, n = t.read("customer"), t.read("orders"), t.read("lineitem"), t.read("nation")
    o = o[_between(o.o_orderdate, "1993-10-01", "1994-01-01")]
    li = li[li.l_returnflag == "R"]
    j = c.merge(o, left_on="c_custkey", right_on="o_custkey").merge(li, left_on="o_orderkey", right_on="l_orderkey")
    j = j.merge(n, left_on="c_nationkey", right_on="n_nationkey")
    j = j.assign(revenue=_revenue(j))
    keys = ["c_custkey", "c_name", "c_acctbal", "c_phone", "n_name", "c_address", "c_comment"]
    g = j.groupby(keys).revenue.sum().reset_index()
    g = g[["c_custkey", "c_name", "revenue", "c_acctbal", "n_name", "c_address", "c_phone", "c_comment"]]
    return g.sort_values("revenue", ascending=False).head(20, compute=False)


def q11(t):
    ps, supplier, n = t.read("partsupp"), t.read("supplier"), t.read("nation")
    j = ps.merge(supplier, left_on="ps_suppkey", right_on="s_suppkey")
    j = j.merge(n[n.n_name == "GERMANY"], left_on="s_nationkey", right_on="n_nationkey")
    j = j.assign(value=j.ps_supplycost * j.ps_availqty)
    threshold = j.value.sum() * (0.0001 / t.scale)
    g = j.groupby("ps_partkey").value.sum().reset_index()
    return g[g.value > threshold].sort_values("value", ascending=False)


def q12(t):
    o, li = t.read("orders"), t.read("lineitem")
    li = li[li.l_shipmode.isin(["MAIL", "SHIP"]) & (li.l_commitdate < li.l_receiptdate)
            & (li.l_shipdate < li.l_commitdate) & _between(li.l_receiptdate, "1994-01-01", "1995-01-01")]
    j = o.merge(li, left_on="o_orderkey", right_on="l_orderkey")
    high = j.o_orderpriority.isin(["1-URGENT", "2-HIGH"])
    j = j.assign(high_line_count=high.astype("int64"), low_line_count=(~high).astype("int64"))
    g = j.groupby("l_shipmode").agg({"high_line_count": "sum", "low_line_count": "sum"}).reset_index()
    return g.sort_values("l_shipmode")


def q13(t):
    c, o = t.read("customer"), t.read("orders")
    o = o[~o.o_comment.str.contains("special.*requests", regex=True)]
    j = c.merge(o, left_on="c_custkey", right_on="o_custkey", how="left")
    # count() skips the missing order of a customer without any
    counts = j.groupby("c_custkey").o_orderkey.count().to_frame("c_count").reset_index()
    g = counts.groupby("c_count").c_custkey.count().to_frame("custdist").reset_index()
    return g.sort_values(["custdist", "c_count"], ascending=[False, False])


def q14(t):
    li, part = t.read("lineitem"), t.read("part")
    li = li[_between(li.l_shipdate, "1995-09-01", "1995-10-01")]
    j = li.merge(part, left_on="l_partkey", right_on="p_partkey")
    revenue = _revenue(j)
    return 100.0 * revenue.where(j.p_type.str.startswith("PROMO"), 0.0).sum() / revenue.sum()


def q15(t):
    li, supplier = t.read("lineitem"), t.read("supplier")
    li = li[_between(li.l_shipdate, "1996-01-01", "1996-04-01")]
    li = li.assign(total_revenue=_revenue(li))
    revenue = li.groupby("l_suppkey").total_revenue.sum().reset_index()
    top = revenue[revenue.total_revenue == revenue.total_revenue.max()]
    s = supplier.merge(top, left_on="s_suppkey", right_on="l_suppkey")
    return s[["s_suppkey", "s_name", "s_address", "s_phone", "total_revenue"]].sort_values("s_suppkey")


def q16(t):
    ps, part, supplier = t.read("partsupp"), t.read("part"), t.read("supplier")
    p = part[(part.p_brand != "Brand#45") & ~part.p_type.str.startswith("MEDIUM POLISHED")
             & part.p_size.isin([49, 14, 23, 45, 19, 3, 36, 9])]
    complaints = supplier[supplier.s_comment.str.contains("Customer.*Complaints", regex=True)]
    j = ps.merge(p, left_on="ps_partkey", right_on="p_partkey")
    # NOT IN: a left join, keeping the offers that found no complained-about supplier
    j = j.merge(complaints[["s_suppkey"]], left_on="ps_suppkey", right_on="s_suppkey", how="left")
    j = j[j.s_suppkey.isna()]
    g = j.groupby(["p_brand", "p_type", "p_size"]).ps_suppkey.nunique().to_frame("supplier_cnt").reset_index()
    return g.sort_values(["supplier_cnt", "p_brand", "p_type", "p_size"], ascending=[False, True, True, True])


def q17(t):
    li, part = t.read("lineitem"), t.read("part")
    p = part[(part.p_brand == "Brand#23") & (part.p_container == "MED BOX")]
    j = p.merge(li, left_on="p_partkey", right_on="l_partkey")
    # the correlated average: per part, over the same lines
    avg = j.groupby("l_partkey").l_quantity.mean().to_frame("avg_qty").reset_index()
    j = j.merge(avg, on="l_partkey")
    return j[j.l_quantity < 0.2 * j.avg_qty].l_extendedprice.sum() / 7.0


def q18(t):
    c, o, li = t.read("customer"), t.read("orders"), t.read("lineitem")
    qty = li.groupby("l_orderkey").l_quantity.sum().to_frame("sum_qty").reset_index()
    big = qty[qty.sum_qty > 300]
    j = c.merge(o, left_on="c_custkey", right_on="o_custkey").merge(big, left_on="o_orderkey", right_on="l_orderkey")
    j = j[["c_name", "c_custkey", "o_orderkey", "o_orderdate", "o_totalprice", "sum_qty"]]
    return j.sort_values(["o_totalprice", "o_orderdate"], ascending=[False, True]).head(100, compute=False)


def q19(t):
    li, part = t.read("lineitem"), t.read("part")
    j = li.merge(part, left_on="l_partkey", right_on="p_partkey")

    def case(brand, containers, low, size):
        return ((j.p_brand == brand) & j.p_container.isin(containers) & (j.l_quantity >= low)
                & (j.l_quantity <= low + 10) & (j.p_size >= 1) & (j.p_size <= size)
                & j.l_shipmode.isin(["AIR", "AIR REG"]) & (j.l_shipinstruct == "DELIVER IN PERSON"))

    j = j[case("Brand#12", ["SM CASE", "SM BOX", "SM PACK", "SM PKG"], 1, 5)
          | case("Brand#23", ["MED BAG", "MED BOX", "MED PKG", "MED PACK"], 10, 10)
          | case("Brand#34", ["LG CASE", "LG BOX", "LG PACK", "LG PKG"], 20, 15)]
    return _revenue(j).sum()


def q20(t):
    supplier, n, ps, part, li = (t.read(name) for name in ("supplier", "nation", "partsupp", "part", "lineitem"))
    forest = part[part.p_name.str.startswith("forest")][["p_partkey"]]
    li = li[_between(li.l_shipdate, "1994-01-01", "1995-01-01")]
    # the correlated sum; an offer without lines in 1994 compares with NULL and drops out in the inner join
    shipped = li.groupby(["l_partkey", "l_suppkey"]).l_quantity.sum().to_frame("qty").reset_index()
    offers = ps.merge(forest, left_on="ps_partkey", right_on="p_partkey")
    offers = offers.merge(shipped, left_on=["ps_partkey", "ps_suppkey"], right_on=["l_partkey", "l_suppkey"])
    # IN: the suppliers with such an offer, each once
    keys = offers[offers.ps_availqty > 0.5 * offers.qty][["ps_suppkey"]].drop_duplicates()
    s = supplier.merge(n[n.n_name == "CANADA"], left_on="s_nationkey", right_on="n_nationkey")
    s = s.merge(keys, left_on="s_suppkey", right_on="ps_suppkey")
    return s[["s_name", "s_address"]].sort_values("s_name")


def q21(t):
    supplier, li, o, n = t.read("supplier"), t.read("lineitem"), t.read("orders"), t.read("nation")
    late = li[li.l_receiptdate > li.l_commitdate]
    # EXISTS another supplier on the order: it has more than one; NOT EXISTS another late supplier on it: the
    # late line's supplier is its only late one
    suppliers = li.groupby("l_orderkey").l_suppkey.nunique().to_frame("suppliers").reset_index()
    late_suppliers = late.groupby("l_orderkey").l_suppkey.nunique().to_frame("late_suppliers").reset_index()
    s = supplier.merge(n[n.n_name == "SAUDI ARABIA"], left_on="s_nationkey", right_on="n_nationkey")
    j = s.merge(late, left_on="s_suppkey", right_on="l_suppkey")
    j = j.merge(o[o.o_orderstatus == "F"], left_on="l_orderkey", right_on="o_orderkey")
    j = j.merge(suppliers, on="l_orderkey").merge(late_suppliers, on="l_orderkey")
    j = j[(j.suppliers > 1) & (j.late_suppliers == 1)]
    g = j.groupby("s_name").l_orderkey.count().to_frame("numwait").reset_index()
    return g.sort_values(["numwait", "s_name"], ascending=[False, True]).head(100, compute=False)


def q22(t):
    c, o = t.read("customer"), t.read("orders")
    c = c.assign(cntrycode=c.c_phone.str.slice(0, 2))
    c = c[c.cntrycode.isin(["13", "31", "23", "29", "30", "18", "17"])]
    average = c[c.c_acctbal > 0.0].c_acctbal.mean()
    c = c[c.c_acctbal > average]
    # NOT EXISTS: a left join keeping the customers without orders
    j = c.merge(o, left_on="c_custkey", right_on="o_custkey", how="left")
    j = j[j.o_custkey.isna()]
    g = j.groupby("cntrycode").agg({"c_custkey": "count", "c_acctbal": "sum"}).reset_index()
    return g.sort_values("cntrycode")


QUERIES = {1: q1, 2: q2, 3: q3, 4: q4, 5: q5, 6: q6, 7: q7, 8: q8, 9: q9, 10: q10, 11: q11, 12: q12, 13: q13, 14: q14,
           15: q15, 16: q16, 17: q17, 18: q18, 19: q19, 20: q20, 21: q21, 22: q22}

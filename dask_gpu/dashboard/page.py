"""The Bokeh document of the GPU page: figures over :func:`~dask_gpu.dashboard.data.worker_rows` and
:class:`~dask_gpu.dashboard.data.SpillHistory`, refreshed twice a second. Imported only to serve it."""

from __future__ import annotations

from html import escape

from bokeh.layouts import column, row
from bokeh.models import BasicTicker, ColumnDataSource, Div, FactorRange, HoverTool, NumeralTickFormatter
from bokeh.plotting import figure
from dask.utils import format_bytes
from distributed.dashboard.components import add_periodic_callback
from distributed.dashboard.components.scheduler import BOKEH_THEME, TICKS_1024, env
from distributed.dashboard.utils import update
from distributed.utils import log_errors

from dask_gpu.dashboard.data import HITS, SpillHistory, worker_rows

HEIGHT = 280
GREEN, BLUE, GREY, LIGHT = "#76B900", "#1f77b4", "#7f7f7f", "#dddddd"
TABLE = [("worker", "Worker"), ("device-text", "Device used / limit"), ("host-text", "Host"), ("disk-text", "Disk"),
         ("spilled-text", "Spilled, in all"), ("unspilled-text", "Unspilled, in all"),
         ("utilization-text", "GPU utilization"), ("nvml-memory-text", "GPU memory (NVML)"),
         (HITS, "Kernel-cache hits")]  # those present in the rows
TABLE_CSS = """table {border-collapse: collapse; font: 12px sans-serif; margin: 6px 12px;}
th, td {padding: 4px 10px; border-bottom: 1px solid #ddd; text-align: right; white-space: nowrap;}
th:first-child, td:first-child {text-align: left;}"""


@log_errors
def build(scheduler, history: SpillHistory, extra: dict, doc) -> None:
    page = GPUPage(scheduler, history)
    page.update()
    add_periodic_callback(doc, page, 500)
    doc.title = "Dask: GPU memory"
    doc.add_root(page.root)
    doc.template = env.get_template("simple.html")
    doc.template_variables.update(extra)  # the menu
    doc.theme = BOKEH_THEME


class GPUPage:
    """Per GPU worker: device memory against its limit, bytes per tier, spill and unspill rates over
    time, GPU utilization, and a table of the figures (with kernel-cache hits once workers report them)."""

    def __init__(self, scheduler, history: SpillHistory):
        self.scheduler, self.history = scheduler, history
        self.workers = ColumnDataSource(worker_rows([]), name="gpu-workers")
        self.rates = ColumnDataSource(history.series(), name="gpu-spill-rates")
        self.names = FactorRange(factors=[])  # the workers, shared by the bar charts
        self.memory, self.tiers = self._memory_figure(), self._tiers_figure()
        self.spill = self._rate_figure("spill", "Spill rate, device → host")
        self.unspill = self._rate_figure("unspill", "Unspill rate, host → device")
        self.utilization = self._utilization_figure()
        # An HTML table, not Bokeh's DataTable: that one redraws only when the number of rows changes
        self.table = Div(text=table_html(worker_rows([])), name="gpu-table", sizing_mode="stretch_width",
                         stylesheets=[TABLE_CSS])
        self.root = column(row(self.memory, self.tiers, sizing_mode="stretch_width"),
                           row(self.spill, self.unspill, sizing_mode="stretch_width"),
                           row(self.utilization, self.table, sizing_mode="stretch_width"),
                           sizing_mode="stretch_width", name="gpu-page")

    def update(self) -> None:
        rows = worker_rows(self.scheduler.workers.values())
        if list(self.names.factors) != rows["worker"]:
            self.names.factors = rows["worker"]
        update(self.workers, {k: v for k, v in rows.items() if k != HITS})  # a column that may come and go: table only
        update(self.rates, self.history.series())
        self.table.text = table_html(rows)
        self._titles(rows)

    def _titles(self, rows: dict) -> None:
        total = sum(rows["limit"])
        limit = f" of {format_bytes(total)}" if total else ""
        self.memory.title.text = f"Device memory: {format_bytes(sum(rows['device']))} used{limit}"
        self.tiers.title.text = ("Bytes per tier: " + ", ".join(
            f"{tier} {format_bytes(sum(rows[tier]))}" for tier in ("device", "host", "disk")))
        self.spill.title.text = f"Spill rate, device → host ({format_bytes(sum(rows['spilled']))} in all)"
        self.unspill.title.text = f"Unspill rate, host → device ({format_bytes(sum(rows['unspilled']))} in all)"

    def _bars(self, name: str, **kwargs):
        fig = figure(y_range=self.names, height=HEIGHT, sizing_mode="stretch_width", tools="", name=name,
                     toolbar_location=None, **kwargs)
        fig.ygrid.visible = False
        return fig

    def _memory_figure(self):
        fig = self._bars("gpu-device-memory", title="Device memory")
        fig.hbar(y="worker", left=0, right="limit", height=0.8, color=LIGHT, source=self.workers,
                 legend_label="limit")
        fig.hbar(y="worker", left=0, right="device", height=0.8, color=GREEN, source=self.workers,
                 legend_label="used")
        fig.text(x=0, y="worker", text="device-text", x_offset=6, text_baseline="middle", text_font_size="11px",
                 source=self.workers)
        fig.add_tools(HoverTool(tooltips="@worker: @{device-text}"))
        return _bytes_axis(fig)

    def _tiers_figure(self):
        fig = self._bars("gpu-tiers", title="Bytes per tier")
        fig.hbar_stack(["device", "host", "disk"], y="worker", height=0.8, color=[GREEN, BLUE, GREY],
                       source=self.workers, legend_label=["device", "host", "disk"])
        fig.add_tools(HoverTool(tooltips="@worker: device @{device-text}, host @{host-text}, disk @{disk-text}"))
        return _bytes_axis(fig)

    def _rate_figure(self, field: str, title: str):
        fig = figure(title=title, x_axis_type="datetime", height=HEIGHT, sizing_mode="stretch_width", tools="",
                     toolbar_location=None, name=f"gpu-{field}-rate")
        fig.multi_line(xs="time", ys=field, color="color", line_width=2, legend_field="worker", source=self.rates)
        fig.yaxis.ticker = BasicTicker(**TICKS_1024)
        fig.yaxis.formatter = NumeralTickFormatter(format="0.0 b")
        fig.yaxis.axis_label = "bytes / s"
        fig.y_range.start = 0
        fig.add_tools(HoverTool(tooltips="@worker"))
        return _legend_outside(fig)

    def _utilization_figure(self):
        fig = self._bars("gpu-utilization", title="GPU utilization (NVML)", x_range=(0, 100))
        fig.sizing_mode, fig.width = "fixed", 420  # the table beside it takes the rest
        fig.hbar(y="worker", left=0, right="utilization", height=0.8, color=GREEN, source=self.workers)
        fig.text(x=0, y="worker", text="utilization-text", x_offset=6, text_baseline="middle",
                 text_font_size="11px", source=self.workers)
        fig.xaxis.axis_label = "%"
        return fig


def table_html(rows: dict) -> str:
    """The rows' figures as an HTML table, one row per worker."""
    columns = [(field, title) for field, title in TABLE if field in rows]
    head = "".join(f"<th>{title}</th>" for _, title in columns)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(rows[field][i]))}</td>" for field, _ in columns) + "</tr>"
                   for i in range(len(rows["worker"])))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _bytes_axis(fig):
    fig.x_range.start = 0
    fig.xaxis.ticker = BasicTicker(**TICKS_1024)  # 256 MiB, not 238.4 MiB
    fig.xaxis.formatter = NumeralTickFormatter(format="0.0 b")  # a model belongs to one document
    return _legend_outside(fig)


def _legend_outside(fig):
    """The legend right of the plot, where it hides no bar or line."""
    fig.add_layout(fig.legend[0], "right")
    return fig

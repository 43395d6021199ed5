"""The GPU page of the dashboard: its data from fake worker metrics, and the page itself in headless Chromium
(driven over the DevTools protocol on 127.0.0.1) on simulated GPUs with a spilling workload."""

import asyncio
import base64
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from types import SimpleNamespace

import dask
import pytest
import standin_device
from distributed import Client
from tornado.websocket import websocket_connect

from dask_gpu import LocalCUDACluster, internals
from dask_gpu.dashboard.data import HITS, SpillHistory, rates, worker_rows
from dask_gpu.dashboard.page import table_html
from standin_device import make, total

MB = 2**20


def fake_worker(name, metrics=None, last_seen=0.0, **nvml):
    return SimpleNamespace(name=name, address=f"tcp://127.0.0.1:{len(name)}/{name}", last_seen=last_seen,
                           metrics={**({"gpu-memory": metrics} if metrics is not None else {}), **nvml})


def memory(device=0, limit=1000, host=0, disk=0, spilled=0, unspilled=0, **more):
    return {"device-bytes": device, "device-limit": limit, "host-bytes": host, "disk-bytes": disk,
            "device-to-host-bytes": spilled, "host-to-device-bytes": unspilled, "oom_retries": 0, **more}


# -- the data, without a browser -----------------------------------------------------------------


def test_rows_are_the_gpu_workers_by_name_with_their_tiers():
    workers = [fake_worker("gpu-1", memory(device=300, host=2 * MB, disk=5 * MB, spilled=7 * MB, unspilled=MB)),
               fake_worker("cpu-0"),  # no device memory, no NVML: not on the page
               fake_worker("gpu-0", memory(device=1000, limit=1000))]
    rows = worker_rows(workers)
    assert rows["worker"] == ["gpu-0", "gpu-1"]
    assert rows["device"] == [1000, 300] and rows["limit"] == [1000, 1000] and rows["unused"] == [0, 700]
    assert rows["host"] == [0, 2 * MB] and rows["disk"] == [0, 5 * MB]
    assert rows["spilled"] == [0, 7 * MB] and rows["unspilled"] == [0, MB]
    assert rows["device-text"] == ["0.98 kiB / 0.98 kiB (100 %)", "300 B / 0.98 kiB (30 %)"]
    assert rows["spilled-text"][1] == "7.00 MiB" and rows["disk-text"][1] == "5.00 MiB"
    assert len({len(column) for column in rows.values()}) == 1  # a table: every column as long


def test_utilization_and_nvml_memory_where_workers_report_them_else_na():
    workers = [fake_worker("gpu-0", memory()),
               fake_worker("gpu-1", memory(), gpu_utilization=37, gpu_memory_used=3 * MB,
                           **{"gpu-memory-total": 80 * MB})]
    rows = worker_rows(workers)
    assert rows["utilization-text"] == ["n/a", "37 %"] and rows["utilization"] == [0.0, 37.0]
    assert rows["nvml-memory-text"] == ["n/a", "3.00 MiB / 80.00 MiB"]


def test_a_worker_without_a_device_tier_shows_no_limit():
    rows = worker_rows([fake_worker("gpu-0", {"oom_retries": 0})])  # device_memory_limit=0: allocator figures only
    assert rows["limit"] == [0] and rows["limit-text"] == ["n/a"]
    assert rows["device-text"] == ["0 B (no device tier)"]


def test_kernel_cache_hits_only_once_a_worker_reports_them():
    assert HITS not in worker_rows([fake_worker("gpu-0", memory())])
    rows = worker_rows([fake_worker("gpu-0", memory(**{HITS: 12345})), fake_worker("gpu-1", memory())])
    assert rows[HITS] == ["12,345", "n/a"]
    assert "Kernel-cache hits" in table_html(rows) and "<td>12,345</td>" in table_html(rows)
    assert "Kernel-cache hits" not in table_html(worker_rows([fake_worker("gpu-0", memory())]))


def test_the_table_has_a_row_per_worker_and_escapes_names():
    html = table_html(worker_rows([fake_worker("<gpu-0>", memory(spilled=3 * MB)), fake_worker("gpu-1", memory())]))
    assert html.count("<tr>") == 3 and "<td>&lt;gpu-0&gt;</td>" in html and "<td>3.00 MiB</td>" in html


def test_no_workers_gives_empty_columns():
    rows = worker_rows([])
    assert rows["worker"] == [] and set(rows) >= {"device", "host", "disk", "spilled", "utilization-text"}


def test_spill_rates_are_differences_between_heartbeats():
    history = SpillHistory(length=10)
    for t, spilled, unspilled in [(100.0, 0, 0), (100.5, 500, 0), (100.5, 999, 999), (101.5, 1500, 250)]:
        history.sample([fake_worker("gpu-0", memory(spilled=spilled, unspilled=unspilled), last_seen=t),
                        fake_worker("cpu-0", last_seen=t)])
    series = history.series()  # the repeated heartbeat time (100.5) was no new heartbeat: not sampled
    assert series["worker"] == ["gpu-0"]
    assert series["time"] == [[100_500.0, 101_500.0]]
    assert series["spill"] == [[1000.0, 1000.0]] and series["unspill"] == [[0.0, 250.0]]


def test_history_forgets_workers_that_left_and_keeps_its_length():
    history = SpillHistory(length=3)
    for t in range(5):
        history.sample([fake_worker("gpu-0", memory(spilled=t), last_seen=t),
                        fake_worker("gpu-1", memory(spilled=2 * t), last_seen=t)])
    assert history.series()["spill"] == [[1.0, 1.0], [2.0, 2.0]] and history.series()["color"][0] == "#76B900"
    history.sample([fake_worker("gpu-1", memory(spilled=10), last_seen=5)])
    assert history.series()["worker"] == ["gpu-1"]


def test_rates_never_go_negative():
    assert rates([(0, 100, 100), (1, 50, 150)]) == ([1000], [0.0], [50.0])
    assert rates([(0, 0, 0)]) == ([], [], [])


def test_import_dask_gpu_does_not_import_bokeh():
    code = "import sys, dask_gpu, dask_gpu.cluster; print('bokeh' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


# -- the page in a browser -------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SIZE = (1400, 1000)

# What the browser holds: the Bokeh document's roots and data, the table's cells and the canvases drawn
# (all inside shadow roots, which --dump-dom leaves out), and the menu.
PROBE = r"""(() => {
  const out = {bokeh: !!window.Bokeh && Bokeh.documents.length > 0};
  if (!out.bokeh) return out;
  const doc = Bokeh.documents[0];
  const column = (name, key) => {
    const source = doc.get_model_by_name(name); if (!source) return [];
    const data = source.data; return Array.from(data instanceof Map ? data.get(key) : data[key]);
  };
  const elements = [];
  const walk = root => { for (const el of root.querySelectorAll("*")) { elements.push(el);
                                                                       if (el.shadowRoot) walk(el.shadowRoot); } };
  walk(document);
  const canvases = elements.filter(el => el.tagName === "CANVAS" && el.width > 0 && el.height > 0);
  const green = canvases.filter(c => { const px = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    for (let i = 0; i < px.length; i += 4) if (px[i] === 118 && px[i + 1] === 185 && px[i + 2] === 0) return true;
    return false; });
  return {bokeh: true, idle: doc.is_idle, title: doc.title(), roots: doc.roots().map(r => r.name),
          workers: column("gpu-workers", "worker"), spilled: column("gpu-workers", "spilled"),
          host: column("gpu-workers", "host"), disk: column("gpu-workers", "disk"),
          device: column("gpu-workers", "device"),
          spill_rates: column("gpu-spill-rates", "spill").map(a => Array.from(a)),
          unspill_rates: column("gpu-spill-rates", "unspill").map(a => Array.from(a)),
          spilled_text: column("gpu-workers", "spilled-text"),
          cells: elements.filter(el => el.tagName === "TD").map(el => el.textContent),
          canvases: canvases.length, green: green.length,
          menu: [...document.querySelectorAll(".navbar a")].map(a => a.getAttribute("href"))};
})()"""


class DevTools:
    """One page of a headless Chromium, over the DevTools protocol (listening on 127.0.0.1 only)."""

    def __init__(self, profile, url):
        self.profile = str(profile)
        self.process = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={self.profile}", "--remote-debugging-address=127.0.0.1",
             "--remote-debugging-port=0", f"--window-size={SIZE[0]},{SIZE[1]}", url],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        self.socket, self.calls = None, 0

    async def connect(self, timeout=30):
        port = self._port(timeout)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=timeout) as response:
            (page,) = [t for t in json.load(response) if t["type"] == "page"]
        assert page["webSocketDebuggerUrl"].startswith(f"ws://127.0.0.1:{port}/")
        self.socket = await asyncio.wait_for(websocket_connect(page["webSocketDebuggerUrl"]), timeout)
        await self.call("Emulation.setDeviceMetricsOverride", width=SIZE[0], height=SIZE[1], deviceScaleFactor=1,
                        mobile=False)

    def _port(self, timeout) -> int:
        path = os.path.join(self.profile, "DevToolsActivePort")  # Chromium writes the port it chose here
        deadline = time.monotonic() + timeout
        while not (os.path.exists(path) and _read(path).strip()):
            assert self.process.poll() is None, f"chromium exited with {self.process.returncode}"
            assert time.monotonic() < deadline, "chromium opened no DevTools port"
            time.sleep(0.1)
        return int(_read(path).split()[0])

    async def call(self, method, timeout=30, **params):
        message = await self._send(method, timeout, **params)
        assert "error" not in message, message
        return message["result"]

    async def _send(self, method, timeout, **params) -> dict:
        self.calls += 1
        self.socket.write_message(json.dumps({"id": self.calls, "method": method, "params": params}))
        while True:
            message = json.loads(await asyncio.wait_for(self.socket.read_message(), timeout))
            if message.get("id") == self.calls:
                return message

    async def probe(self) -> dict:
        """What PROBE finds; or the error, while the page is still loading (a context replaced mid-call)."""
        message = await self._send("Runtime.evaluate", 30, expression=PROBE, returnByValue=True)
        result = message.get("result", {})
        if "error" in message or "exceptionDetails" in result:
            return {"error": message.get("error") or result["exceptionDetails"]}
        return result["result"]["value"]

    async def wait_for(self, condition, what, timeout=60) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            seen = await self.probe()
            if seen.get("idle") and condition(seen):
                return seen
            assert time.monotonic() < deadline, f"the page never showed {what}; it showed {seen}"
            await asyncio.sleep(0.25)

    async def screenshot(self, path):
        shot = await self.call("Page.captureScreenshot", format="png")
        with open(path, "wb") as f:
            f.write(base64.b64decode(shot["data"]))

    def close(self):
        if self.socket is not None:
            self.socket.close()
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


def _read(path) -> str:
    with open(path) as f:
        return f.read()


def spill(client, rounds, nbytes=6 * MB, pause=0.0):
    """Stand-in device objects past each worker's device limit (spilled), and reads of old ones (unspilled)."""
    workers = sorted(internals.scheduler_identity(client)["workers"])
    kept = []
    for i in range(rounds):
        kept += [client.submit(make, nbytes, i, workers=[w], pure=False) for w in workers]
        if i >= 3:  # three fit under the limit: the round three back is on the host by now
            client.gather([client.submit(total, f, workers=[w], pure=False) for f, w in zip(kept[-8:-6], workers)])
        time.sleep(pause)
    client.gather(kept)
    return kept


def wait_for_spilled_heartbeats(client, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        seen = [w["metrics"].get("gpu-memory", {}).get("device-to-host-bytes", 0)
                for w in internals.scheduler_identity(client)["workers"].values()]
        if len(seen) == 2 and min(seen) > 0:
            return sum(seen)
        assert time.monotonic() < deadline, f"the heartbeats never reported spilling: {seen}"
        time.sleep(0.1)


def peak(lines) -> float:
    return max((value for line in lines for value in line), default=0)


async def look(url, profile, shot, workload):
    """Open the page, check its data, run more of ``workload`` and check that the page follows."""
    browser = DevTools(profile, url)
    try:
        await browser.connect()
        first = await browser.wait_for(lambda s: s["workers"] == ["gpu-0", "gpu-1"] and min(s["spilled"]) > 0,
                                       "both workers with spilled bytes")
        await asyncio.get_running_loop().run_in_executor(None, workload)
        live = await browser.wait_for(  # the table and the figures redraw apart: until they agree
            lambda s: sum(s["spilled"]) > sum(first["spilled"]) and peak(s["unspill_rates"]) > 0
            and set(s["spilled_text"]) <= set(s["cells"]),
            "the new spilling, unspill rates, and the table showing the figures' numbers")
        await asyncio.sleep(1.5)  # a last redraw of the rate lines before the picture
        await browser.screenshot(shot)
        return first, live
    finally:
        browser.close()


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium package (apt-get install chromium)")
@pytest.mark.timeout(240)
def test_the_page_renders_live_spilling_in_chromium(simulate, tmp_path):
    simulate(2)
    host_target = {"distributed.worker.memory.target": 0.05}  # past 50 MB of host memory, to disk: all three tiers
    with dask.config.set(host_target), LocalCUDACluster(device_memory_limit=20 * MB, memory_limit="1GB",
                                                        dashboard_address="127.0.0.1:0") as cluster, \
            Client(cluster) as client:
        client.run(standin_device.register)  # the stand-in device type, in each worker
        spill(client, rounds=6)
        wait_for_spilled_heartbeats(client)
        assert cluster.dashboard_link.startswith("http://127.0.0.1:")
        url = cluster.dashboard_link.replace("/status", "/gpu")
        shot, kept = tmp_path / "gpu-dashboard.png", []  # kept: the data stays on the workers for the picture
        first, live = asyncio.run(asyncio.wait_for(
            look(url, tmp_path / "profile", shot, lambda: kept.append(spill(client, rounds=16, pause=0.25))), 180))

    assert first["title"] == "Dask: GPU memory" and first["roots"] == ["gpu-page"]
    assert "gpu" in first["menu"]  # the menu entry, on a machine whose scheduler sees no GPU
    assert min(live["host"]) > 0 and min(live["disk"]) > 0 and all(0 < d <= 20 * MB for d in live["device"])
    assert peak(live["spill_rates"]) > 0
    assert {"gpu-0", "gpu-1", "n/a", *live["spilled_text"]} <= set(live["cells"])  # the table, current; no NVML here
    assert live["canvases"] >= 5 and live["green"] >= 2  # five figures, with bars and lines drawn
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    if os.environ.get("DASK_GPU_DASHBOARD_SCREENSHOT"):  # docs/_static/gpu-dashboard.png is made this way
        shutil.copyfile(shot, os.environ["DASK_GPU_DASHBOARD_SCREENSHOT"])


def check_page_served(client):
    """/gpu serves this page (no browser: the document the server made for the request), and the menu has it."""

    def gpu_sessions(dask_scheduler):  # defined here: pickled by value, for a scheduler in another process
        (bokeh,) = [app for app in dask_scheduler.http_application.applications if hasattr(app, "get_sessions")]
        return [[root.name for root in session.document.roots] for session in bokeh.get_sessions("/gpu")]

    base = client.dashboard_link.rsplit("/", 1)[0]
    assert base.startswith("http://127.0.0.1:")
    with urllib.request.urlopen(base + "/gpu", timeout=30) as response:
        assert response.status == 200
    assert client.run_on_scheduler(gpu_sessions) == [["gpu-page"]]  # distributed's own page has other roots
    with urllib.request.urlopen(base + "/status", timeout=30) as response:
        assert 'href="gpu"' in response.read().decode()  # the menu, though the scheduler's machine has no GPU


def test_local_cuda_cluster_serves_the_page(simulate):
    simulate(1)
    with LocalCUDACluster(dashboard_address="127.0.0.1:0", device_memory_limit="4MB") as cluster, \
            Client(cluster) as client:
        deadline = time.monotonic() + 30
        while not client.run_on_scheduler(lambda dask_scheduler: "dask-gpu-spill-history" in dask_scheduler.extensions):
            assert time.monotonic() < deadline, "the dashboard never attached"  # it attaches in the background
            time.sleep(0.1)
        check_page_served(client)


def test_a_dask_scheduler_gets_the_page_with_a_preload(tmp_path):
    path = str(tmp_path / "scheduler.json")
    scheduler = subprocess.Popen(
        [sys.executable, "-m", "dask", "scheduler", "--host", "127.0.0.1", "--port", "0", "--dashboard-address",
         "127.0.0.1:0", "--scheduler-file", path, "--preload", "dask_gpu.dashboard"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = None
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(path):
            assert scheduler.poll() is None and time.monotonic() < deadline, "the scheduler did not start"
            time.sleep(0.1)
        worker = subprocess.Popen(
            [sys.executable, "-m", "dask", "gpu", "worker", "--scheduler-file", path, "--no-dashboard",
             "--device-memory-limit", "4MB", "--name", "node"],
            env={**os.environ, "DASK_GPU__SIMULATE": "1"}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with Client(scheduler_file=path, timeout="20s") as client:
            client.wait_for_workers(1, timeout=60)
            check_page_served(client)
            rows = client.run_on_scheduler(lambda dask_scheduler: worker_rows(dask_scheduler.workers.values()))
            assert rows["worker"] == ["node-gpu-0"] and rows["limit"] == [4 * 10**6]
    finally:
        for process in (worker, scheduler):
            if process is not None:
                process.terminate()
                process.wait(30)


def busy_gpu(seconds):
    import cupy

    x = cupy.ones((4096, 4096), dtype="float32")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        x = x @ x / 4096
        cupy.cuda.Device().synchronize()
    return float(x[0, 0])


@pytest.mark.gpu
def test_the_page_shows_nvml_utilization_and_memory_of_a_real_gpu():
    with LocalCUDACluster(n_workers=1, dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client:
        client.submit(busy_gpu, 4, pure=False).result(timeout=120)
        deadline = time.monotonic() + 30
        while True:
            rows = worker_rows(cluster.scheduler.workers.values())
            if rows["worker"] and "n/a" not in rows["utilization-text"][0] + rows["nvml-memory-text"][0]:
                break
            assert time.monotonic() < deadline, rows
            time.sleep(0.5)
        assert rows["worker"] == ["gpu-0"] and rows["limit"][0] > 0
        assert rows["utilization-text"][0].endswith(" %") and " / " in rows["nvml-memory-text"][0]
        port = cluster.scheduler.http_server.port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/gpu", timeout=30) as page:
            assert page.status == 200 and b"bokeh" in page.read().lower()

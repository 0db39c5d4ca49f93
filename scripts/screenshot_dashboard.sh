#!/usr/bin/env bash
# Screenshots of the Ray dashboard showing the RLFH services and their metrics (docs/img/ray-dashboard*.png).
#
#   bash scripts/screenshot_dashboard.sh            # writes docs/img/ray-dashboard-*.png
#
# What it does: starts an embedded Ray (dashboard + Prometheus metrics export on free loopback ports,
# token auth off: RAY_AUTH_MODE=disabled), deploys the real reward service (verifier + reward
# deployments, evidence backend), sends real /v1/rewards requests with HaluEval-QA items for a while,
# then takes headless-Chromium screenshots of:
#   1. the dashboard's Serve page (application rlfh-rewards, its deployments and their state),
#   2. the application's page (deployments, replicas, route prefix),
#   3. the Prometheus endpoint of Ray's metrics agent (what Prometheus/Grafana scrape), scrolled to the
#      project's ray_rlfh_* series (DevTools protocol: find the text, capture).
# Ray's own Metrics page embeds Grafana, which is not installed here, so it is not shot.
# Needs Debian's chromium (installed with apt-get when missing). Everything it starts, it stops.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-docs/img}
WORK=$(mktemp -d)
mkdir -p "$OUT"

if ! command -v chromium >/dev/null 2>&1; then
  echo "[screenshot] chromium not found: installing Debian's chromium"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq chromium >/dev/null
fi

export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 TOKENIZERS_PARALLELISM=false DS_ACCELERATOR=cpu
unset RAY_ADDRESS REDIS_URL || true

cat > "$WORK/serve.py" <<'PYEOF'
"""Embedded Ray + the reward service + a trickle of real requests, until the parent says stop."""
import json, os, socket, sys, time
import httpx

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); return s.getsockname()[1]

work = sys.argv[1]
dash, metrics_port, serve_port, agent_port = free_port(), free_port(), free_port(), free_port()
# ray.init() has no argument for the dashboard agent's port (fixed 52365, taken when another Ray runs here)
import ray._private.parameter as params
_base = params.RayParams
class _Params(_base):
    def __init__(self, *a, **kw):
        kw.setdefault("dashboard_agent_listen_port", agent_port); super().__init__(*a, **kw)
params.RayParams = _Params
import ray
ray.init(num_cpus=2, include_dashboard=True, dashboard_host="127.0.0.1", dashboard_port=dash,
         _metrics_export_port=metrics_port)
params.RayParams = _base
from core.config import RLFHConfig
from core.data import load_halueval
from reward_service.app import deploy
url = deploy(RLFHConfig.load(environ={}), "127.0.0.1", serve_port)
items = load_halueval("test")[:24]
sent = 0
with httpx.Client(base_url=url, timeout=120) as http:
    for round_ in range(3):                      # the 2nd and 3rd rounds hit the cache
        for i in range(0, len(items), 4):
            batch = [{"question": it.question, "materials": it.knowledge,
                      "response": it.right_answer if (j + round_) % 3 else it.hallucinated_answer}
                     for j, it in enumerate(items[i:i + 4])]
            http.post("/v1/rewards", json={"items": batch}).raise_for_status(); sent += 1
    http.post("/v1/rewards", json={"items": []})          # one 422, counted by status
print(f"sent {sent} reward requests", flush=True)
with open(os.path.join(work, "ready.json"), "w") as f:
    json.dump({"dashboard": f"http://127.0.0.1:{dash}", "metrics": f"http://127.0.0.1:{metrics_port}/metrics",
               "serve": url}, f)
deadline = time.time() + 600
while time.time() < deadline and not os.path.exists(os.path.join(work, "stop")):
    time.sleep(1)
from ray import serve
serve.shutdown(); ray.shutdown()
PYEOF

# A plain-text page cannot be scrolled by URL in headless --screenshot mode (a text fragment gives a
# blank shot), so the metrics endpoint is shot through the DevTools protocol: find the text, capture.
cat > "$WORK/cdp_shot.py" <<'PYEOF'
"""Screenshot of URL after scrolling to the first occurrence of TEXT (Chrome DevTools Protocol)."""
import asyncio, base64, json, os, socket, subprocess, sys, tempfile, time, urllib.request
import websockets

url, text, out = sys.argv[1], sys.argv[2], sys.argv[3]
with socket.socket() as s:
    s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
proc = subprocess.Popen(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                         "--disable-background-networking", "--disable-component-update", "--disable-sync",
                         f"--user-data-dir={tempfile.mkdtemp()}", "--hide-scrollbars", "--window-size=1600,1000",
                         f"--remote-debugging-port={port}", "about:blank"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    for _ in range(100):
        try:
            pages = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2))
            ws = next(p["webSocketDebuggerUrl"] for p in pages if p["type"] == "page"); break
        except Exception:
            time.sleep(0.2)
    else:
        sys.exit("chromium did not open its debugging port")

    async def main():
        async with websockets.connect(ws, max_size=1 << 26) as c:
            n = 0
            async def call(method, **params):
                nonlocal n
                n += 1; mid = n
                await c.send(json.dumps({"id": mid, "method": method, "params": params}))
                while True:
                    msg = json.loads(await asyncio.wait_for(c.recv(), 30))
                    if msg.get("id") == mid:
                        if "error" in msg: raise RuntimeError(msg["error"])
                        return msg.get("result", {})
            await call("Page.enable")
            await call("Page.navigate", url=url)
            await asyncio.sleep(3)
            found = await call("Runtime.evaluate", expression=f"window.find({json.dumps(text)}) && "
                               "(window.getSelection().removeAllRanges(), window.scrollBy(0, -8), true)",
                               returnByValue=True)
            if not found.get("result", {}).get("value"):
                raise SystemExit(f"{text!r} not found on {url}")
            await asyncio.sleep(0.5)
            shot = await call("Page.captureScreenshot", format="png")
            with open(out, "wb") as f:
                f.write(base64.b64decode(shot["data"]))
    asyncio.run(main())
    print(f"[screenshot] {out}")
finally:
    proc.terminate()
    try: proc.wait(10)
    except subprocess.TimeoutExpired: proc.kill()
PYEOF

"$PY" "$WORK/serve.py" "$WORK" > "$WORK/serve.log" 2>&1 &
SERVER=$!
cleanup() { touch "$WORK/stop"; wait "$SERVER" 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

for _ in $(seq 300); do
  [[ -f "$WORK/ready.json" ]] && break
  kill -0 "$SERVER" 2>/dev/null || { cat "$WORK/serve.log"; echo "[screenshot] service process died" >&2; exit 1; }
  sleep 1
done
[[ -f "$WORK/ready.json" ]] || { echo "[screenshot] service not ready after 300 s" >&2; exit 1; }
DASH=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["dashboard"])' "$WORK/ready.json")
METRICS=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["metrics"])' "$WORK/ready.json")
echo "[screenshot] dashboard $DASH, metrics $METRICS"

# metrics are exported every few seconds: wait until the service's series are on the endpoint
for _ in $(seq 60); do
  curl -s --max-time 5 "$METRICS" | grep -q '^ray_rlfh_reward_requests_total' && break
  sleep 2
done

shot() {  # shot URL FILE
  chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
    --disable-component-update --disable-sync --user-data-dir="$(mktemp -d -p "$WORK")" --hide-scrollbars \
    --virtual-time-budget=20000 --window-size=1600,1000 --screenshot="$2" "$1" >/dev/null 2>&1
  echo "[screenshot] $2"
}
shot "$DASH/#/serve" "$OUT/ray-dashboard-serve.png"
shot "$DASH/#/serve/applications/rlfh-rewards" "$OUT/ray-dashboard-serve-app.png"
"$PY" "$WORK/cdp_shot.py" "$METRICS" "# HELP ray_rlfh_reward_requests_total" "$OUT/ray-dashboard-metrics-endpoint.png"

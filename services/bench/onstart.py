"""The shell line vast's `onstart` runs to benchmark a new instance: fetch the suite from bench, run it, report.

It runs in the background so the image's own start-up is not delayed, and uses only python3 (present in any
image that runs the workload) to download. The line is the same for every machine and holds no secret: each
instance's own report token (`FLEETPILOT_BENCH_TOKEN`, tokens.py) comes in its environment, set at create.
"""

from __future__ import annotations

import shlex

# vast.ai limits args + onstart to 4096 characters (docs say 4048 for onstart): leave room for the image's own.
ONSTART_MAX_CHARS = 1500
SUITE_DIR = "/tmp"


def onstart_command(
    bench_url: str,
    *,
    task_command: str | None = None,
    device: str = "cuda",
    suite_dir: str = SUITE_DIR,
) -> str:
    """`bench_url` is where instances reach the bench service's HTTP port (e.g. https://bench.example.com).

    `device` stays "cuda" on rented machines: a GPU machine whose CUDA does not work must fail, not pass as CPU.
    """
    base = bench_url.rstrip("/")
    suite_file = shlex.quote(f"{suite_dir}/fleetpilot_gpu_suite.py")
    suite_log = shlex.quote(f"{suite_dir}/fleetpilot_gpu_suite.log")
    download = (
        "python3 -c 'import sys,urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "
        f"{shlex.quote(base + '/bench/suite.py')} {suite_file}"
    )
    run = f"python3 {suite_file} --device {shlex.quote(device)} --report-url {shlex.quote(base + '/bench/report')}"
    if task_command:
        run += f" --task-command {shlex.quote(task_command)}"
    line = f"( {download} && {run} ) > {suite_log} 2>&1 &"
    if len(line) > ONSTART_MAX_CHARS:
        raise ValueError(f"onstart line of {len(line)} characters exceeds {ONSTART_MAX_CHARS}; shorten task_command")
    return line

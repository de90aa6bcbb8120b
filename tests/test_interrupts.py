"""Real signals and real command lines: an experiment script and the demo, stopped by SIGINT or SIGTERM.

Each test starts a process, waits until training has started (its progress bar on stderr),
sends one signal, and checks the exit status 130, the message, and that no summary or table
claims a complete run. The refusals of the experiment command line run the real script too.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXPERIMENT = ["-m", "experiments.reliability", "--preset", "smoke"]  # the shipped MNIST sample; trains at once


class Process:
    """A child process whose stderr is read as it comes (progress bars end lines with \\r, not \\n)."""

    def __init__(self, args: list[str], **env: str):
        self.proc = subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True,
                                     env=os.environ | {"JAXCOMM_NO_REPORT": "1", "PYTHONUNBUFFERED": "1"} | env)
        self.read_stderr()

    def read_stderr(self) -> None:
        """Starts reading ``self.proc``'s stderr into ``self.err`` as it comes."""
        self.err = ""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        while chunk := self.proc.stderr.read(1):
            self.err += chunk

    def wait_for(self, marker: str, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while marker not in self.err:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                pytest.fail(f"{marker!r} never appeared (status {self.proc.poll()}):\n{self.err[-3000:]}")
            time.sleep(0.05)

    def finish(self, timeout: float = 60.0) -> tuple[int, str, str]:
        try:
            out = self.proc.stdout.read() if self.proc.wait(timeout) is not None else ""
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail(f"still running {timeout} s after the signal:\n{self.err[-3000:]}")
        self._reader.join(5)
        return self.proc.returncode, out, self.err


def run(args: list[str], **env: str) -> tuple[int, str, str]:
    done = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=os.environ | {"JAXCOMM_NO_REPORT": "1"} | env)
    return done.returncode, done.stdout, done.stderr


# One signal each here (the driver's own tests send both, in-process): a process start costs ~20 s on 2 cores.
@pytest.mark.parametrize("signum", [signal.SIGINT], ids=["SIGINT"])
def test_an_interrupted_experiment_exits_130_and_says_how_to_resume(tmp_path, signum):
    out = tmp_path / "out"
    proc = Process([*EXPERIMENT, "--out", str(out)])
    proc.wait_for("n4_f0:")  # the first sweep's progress bar: training has started
    time.sleep(1.0)
    proc.proc.send_signal(signum)
    status, _, err = proc.finish()
    assert status == 130, err[-3000:]
    assert "interrupted" in err and f"--out {out} --resume" in err
    assert not (out / "summary.json").exists() and not (out / "table.md").exists()
    assert (out / "checkpoints" / "config.json").is_file()
    if signum == signal.SIGINT:  # the refusals, on the same folder
        status, _, err = run([*EXPERIMENT, "--out", str(out)])
        assert status == 2 and err.strip().count("\n") == 0, err
        assert "--resume" in err and "--fresh" in err and (out / "checkpoints").is_dir()


def test_the_experiment_refuses_another_presets_results(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps({"experiment": "reliability", "preset": "cpu", "rows": {}}))
    status, _, err = run([*EXPERIMENT, "--out", str(tmp_path)])
    assert status == 2 and err.strip().count("\n") == 0 and "preset 'cpu'" in err and "--force" in err, err
    assert json.loads((tmp_path / "summary.json").read_text())["preset"] == "cpu"


def test_data_dir_reaches_the_loader_and_a_data_error_is_one_line(tmp_path):
    out, empty = tmp_path / "out", tmp_path / "no-mnist-here"
    empty.mkdir()
    status, _, err = run([*EXPERIMENT, "--out", str(out), "--data-dir", str(empty), "dataset=mnist"],
                         JAXCOMM_DATA_DIR="")
    assert status == 2, err
    assert err.strip().count("\n") == 0 and "Traceback" not in err and str(empty) in err, err
    assert not out.exists()  # no empty checkpoints/ folder left behind


@pytest.mark.parametrize("signum", [signal.SIGTERM], ids=["SIGTERM"])
def test_an_interrupted_demo_exits_130_without_a_table(signum):
    # 20,000 steps: chunks of 4,000 (a scanned chunk is cut for a signal only once its length has been timed, so
    # the first one runs whole: 20,000 steps took over 60 s on a loaded 2-core machine)
    proc = Process(["-m", "jaxcomm", "demo", "--nodes", "4", "--hidden", "16", "--steps", "20000", "--seeds", "1",
                    "--backend", "vmap"])
    proc.wait_for("isolated, seed 0:")
    time.sleep(1.0)
    proc.proc.send_signal(signum)
    status, out, err = proc.finish()
    assert status == 130, err[-3000:]
    assert "interrupted after" in err and "no table" in err
    assert "| network |" not in out and "sharing true labels" not in err


def test_two_interrupts_during_the_first_compile_end_the_process_with_130_not_a_crash():
    """Issue 72 item 5: the first SIGINT is answered at once on stderr; a second one, sent while the first program
    still compiles, ends the process with status 130 (never SIGSEGV, -11)."""
    proc = Process(["-m", "jaxcomm", "demo", "--nodes", "4", "--hidden", "16", "--steps", "20000", "--seeds", "1",
                    "--backend", "vmap"])
    proc.wait_for("isolated, seed 0:")  # its bar drawn: the first chunk is about to compile
    proc.proc.send_signal(signal.SIGINT)
    proc.wait_for("interrupted: stopping at the next check", timeout=30.0)  # answered at once, whatever compiles
    proc.proc.send_signal(signal.SIGINT)
    status, out, err = proc.finish()
    assert status == 130, err[-3000:]
    assert "| network |" not in out

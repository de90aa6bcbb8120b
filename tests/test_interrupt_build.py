"""A clean Ctrl-C at any moment (issue 59 item 1): :func:`jaxcomm.driver.interruptible` guards a whole call.

The real signals come from this process to a child, while the child compiles a program for seconds (outside a
training loop: a build, a system's ``init``, a network's backend timing); before the guard, a KeyboardInterrupt
raised inside XLA's compile made the child die of a segmentation fault at exit, and a child whose SIGINT was
ignored (started in the background of a non-interactive shell) dropped the signal and trained to its end. The
in-process tests pin the guard's rules: nesting, the restored handlers, and a signal no check acted on.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import threading
import time

import jax
import jax.numpy as jnp
import pytest
from test_interrupts import Process  # its stderr reader

from jaxcomm import driver

ROOT = pathlib.Path(__file__).resolve().parents[1]

# The child. "build": a guarded call compiles a slow program (a backend being timed, say), then trains a system
# stepping with it; "init": a plain driver.train whose system's init compiles the slow program; "network": a
# 10-node MLP network (mnist_sample), its backend chosen by timing, through network.train_network guarded here.
# The marker (with the child's pid) is printed just before the compile, or the call, starts.
SCRIPT = r'''
import json, os, signal, sys, time
import jax, jax.numpy as jnp
from jaxcomm import driver

jax.config.update("jax_enable_compilation_cache", False)

mode = sys.argv[1]
ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN


def slow(x):  # 200 dependent ops: seconds of XLA compilation on a 2-core CPU, milliseconds to run
    for i in range(200):
        x = jnp.tanh(x @ x.T * (1.0 + i * 1e-3)) + jnp.sin(x[::-1])
    return x


def marker(what):
    print(f"{what} pid={os.getpid()}", file=sys.stderr, flush=True)


def system(init, step):
    return driver.System(init, lambda s, d: (step(s), jnp.sum(s)), lambda s, i, d: {"sum": float(jnp.sum(s))},
                         step_loop="eager")


out = {"ignored": ignored}
try:
    if mode == "build":
        with driver.interruptible() as guard:
            lowered = jax.jit(slow).lower(jnp.ones((8, 8)))
            marker("compiling")
            start = time.perf_counter()
            program = lowered.compile()
            out["compile_seconds"] = time.perf_counter() - start
            out["during_compile"] = guard.signum is not None  # the signal came before the compile ended
            result = driver.train(system(lambda key: jnp.ones((8, 8)) / 8, program), None, num_steps=20,
                                  eval_every=5, key=jax.random.PRNGKey(0), progress=False)
    elif mode == "init":
        def init(key):
            marker("compiling")
            return jax.jit(slow)(jnp.ones((8, 8)) / 8)

        result = driver.train(system(init, jnp.tanh), None, num_steps=20, eval_every=5, key=jax.random.PRNGKey(0),
                              progress=False)
    else:
        from jaxcomm import data, network
        from jaxcomm.models import MLP

        dataset = data.load_dataset("mnist_sample")
        config = network.NetworkConfig(num_nodes=10, num_steps=200, eval_every=100, seed=0, backend="auto")
        marker("building")
        result = driver.interruptible(network.train_network)(config, MLP(hidden=(64,), num_classes=10), dataset,
                                                             progress=False)
    out |= {"status": result["status"], "steps_done": result["steps_done"]}
except KeyboardInterrupt as error:
    out |= {"status": "raised", "error": repr(error)}
out["restored"] = signal.getsignal(signal.SIGINT) == (signal.SIG_IGN if ignored else signal.default_int_handler)
print(json.dumps(out), flush=True)
'''


class Child(Process):
    """The script in a child process, its stderr read as it comes; ``background``: started the way a
    non-interactive shell starts a job in the background (``cmd &``), which leaves its SIGINT ignored."""

    def __init__(self, tmp_path: pathlib.Path, mode: str, *, background: bool = False):
        script = tmp_path / "child.py"
        script.write_text(SCRIPT)
        args = [sys.executable, str(script), mode]
        if background:
            args = ["sh", "-c", '"$@" & wait $!', "sh", *args]
        # No persistent compilation cache (the tests' own would compile the slow program once for all): every
        # child compiles for seconds. "auto" backends are timed (JAXCOMM_AUTOTUNE, off in tests) with no choice
        # cached yet (JAXCOMM_CACHE_DIR).
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT"))}
        env |= {"JAXCOMM_NO_REPORT": "1", "PYTHONUNBUFFERED": "1", "JAXCOMM_AUTOTUNE": "1",
                "JAXCOMM_CACHE_DIR": str(tmp_path / "cache")}
        # The foreground child starts with SIGINT at its default whatever this process inherited (a test run started
        # in the background of a shell ignores it); the background one gets the shell's SIG_IGN.
        self.proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=env, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.read_stderr()

    def signal_after(self, marker: str, delay: float, signum: int = signal.SIGINT, timeout: float = 60.0) -> None:
        """Sends ``signum`` to the script (not to a shell around it) ``delay`` s after ``marker pid=N``."""
        deadline = time.monotonic() + timeout
        while not (found := re.search(rf"{marker} pid=(\d+)\n", self.err)):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                pytest.fail(f"{marker!r} never appeared (status {self.proc.poll()}):\n{self.err[-3000:]}")
            time.sleep(0.02)
        time.sleep(delay)
        os.kill(int(found.group(1)), signum)

    def finish(self, timeout: float = 60.0) -> tuple[int, dict]:
        try:
            out = self.proc.communicate(timeout=timeout)[0]
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail(f"still running {timeout} s after the signal:\n{self.err[-3000:]}")
        self._reader.join(5)
        lines = out.strip().splitlines()
        assert lines, f"no result (status {self.proc.returncode}):\n{self.err[-3000:]}"
        return self.proc.returncode, json.loads(lines[-1])


@pytest.mark.parametrize("background", [False, True], ids=["foreground", "background-job"])
def test_a_signal_while_a_guarded_build_compiles_stops_the_call_without_a_crash(tmp_path, background):
    child = Child(tmp_path, "build", background=background)
    child.signal_after("compiling", 0.3)
    status, out = child.finish()
    # 0: no death by a signal (-11 from the child itself; 128 + N through the shell), a normal exit
    assert status == 0, child.err[-3000:]
    assert out["ignored"] is background and out["during_compile"], out
    # the run saw the signal at its first check: interrupted before training anything, never complete
    assert out["status"] == "interrupted" and out["steps_done"] == 0, out
    assert out["restored"], out  # the handler from before the guard (SIG_IGN in the background) is back


def test_a_signal_while_a_systems_init_compiles_stops_a_plain_driver_train(tmp_path):
    child = Child(tmp_path, "init")
    child.signal_after("compiling", 0.3)
    status, out = child.finish()
    assert status == 0, child.err[-3000:]
    assert out["status"] == "interrupted" and out["steps_done"] == 0 and out["restored"], out


def test_a_signal_while_a_guarded_network_is_built_and_its_backend_timed(tmp_path):
    # 2 s after the call starts: the backend is being timed (2-3 s on a loaded 2-core CPU), or its first
    # program compiles; unguarded, 2 of 3 such runs died of a segmentation fault at exit
    child = Child(tmp_path, "network")
    child.signal_after("building", 2.0)
    status, out = child.finish()
    assert status == 0, child.err[-3000:]
    assert out["status"] == "interrupted" and out["steps_done"] < 200 and out["restored"], out


# In-process: signal.raise_signal runs the handler before it returns.


def counter_system() -> driver.System:
    return driver.System(lambda key: jnp.int32(0), lambda state, data: (state + 1, state),
                         lambda state, infos, done: {"count": int(state)}, step_loop="dispatch")


def train(**kwargs) -> dict:
    return driver.train(counter_system(), None, num_steps=8, eval_every=4, key=jax.random.PRNGKey(0),
                        progress=False, **kwargs)


def test_a_signal_in_a_guarded_block_before_train_stops_the_run_after_no_steps():
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with driver.interruptible() as guard:
        assert signal.getsignal(signal.SIGINT) not in (before[signal.SIGINT], signal.SIG_IGN, signal.SIG_DFL)
        signal.raise_signal(signal.SIGINT)  # "while building": only the flag is set
        assert guard.signum == signal.SIGINT
        result = train()
        later = train()  # the call's later runs (a sweep's) stop alike
    # acted on: nothing raised on leaving the block, and the handlers from before are back
    assert result["status"] == "interrupted" and result["interrupted"] and result["steps_done"] == 0
    assert result["history"] == [] and result["final"] is None
    assert later["status"] == "interrupted" and later["steps_done"] == 0
    assert {s: signal.getsignal(s) for s in before} == before
    assert train()["status"] == "complete"  # a later call starts with no signal


def test_the_decorator_guards_each_call_and_keeps_the_function():
    @driver.interruptible
    def build_and_train(signum):
        """Builds, then trains."""
        if signum is not None:
            signal.raise_signal(signum)
        return train()

    assert build_and_train.__name__ == "build_and_train" and build_and_train.__doc__ == "Builds, then trains."
    before = signal.getsignal(signal.SIGTERM)
    stopped = build_and_train(signal.SIGTERM)
    assert stopped["status"] == "interrupted" and stopped["steps_done"] == 0
    assert build_and_train(None)["status"] == "complete"
    assert signal.getsignal(signal.SIGTERM) == before


def test_guards_nest_on_one_flag_and_only_the_outermost_installs_handlers():
    with driver.interruptible() as outer:
        handler = signal.getsignal(signal.SIGINT)
        with driver.interruptible() as inner:
            assert signal.getsignal(signal.SIGINT) == handler  # nothing installed again
            signal.raise_signal(signal.SIGINT)
        # the inner guard passed nothing on: the signal waits for the outer one's check
        assert inner.signum == outer.signum == signal.SIGINT
        with pytest.raises(KeyboardInterrupt, match=f"signal {int(signal.SIGINT)}"):
            driver.interruption_point()
    driver.interruption_point()  # outside any guard: nothing


def test_a_signal_no_check_acted_on_is_passed_on_as_the_block_ends():
    before = signal.getsignal(signal.SIGINT)
    reached = []
    with pytest.raises(KeyboardInterrupt):  # Python's own SIGINT handler, which the guard replaced
        with driver.interruptible():
            signal.raise_signal(signal.SIGINT)
            reached.append("end of block")  # the block itself goes on
    assert reached == ["end of block"] and signal.getsignal(signal.SIGINT) == before

    seen = []
    old = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        with driver.interruptible():
            signal.raise_signal(signal.SIGTERM)
            assert seen == []
        assert seen == [signal.SIGTERM]  # the handler from before got it, once
        # an exception from the block goes on as it is (the call is unfinished anyway)
        with pytest.raises(ValueError, match="build failed"), driver.interruptible():
            signal.raise_signal(signal.SIGTERM)
            raise ValueError("build failed")
        assert seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, old)


def test_over_an_ignored_sigint_the_guard_catches_it_and_never_drops_it():
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as in a job started in the background of a shell
    try:
        with pytest.raises(KeyboardInterrupt, match=f"signal {int(signal.SIGINT)}"), driver.interruptible():
            signal.raise_signal(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        with driver.interruptible():
            signal.raise_signal(signal.SIGINT)
            result = train()
        assert result["status"] == "interrupted" and result["steps_done"] == 0
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, old)


def test_a_second_signal_ends_the_process_at_once_with_128_plus_the_signal(monkeypatch, capsys):
    """Issue 72 item 5: never a KeyboardInterrupt raised inside XLA (a compile in progress can die of it): the
    process exits with 130 at once (here the exit is recorded instead); the first signal is answered on stderr."""
    reached, exits = [], []

    def exit_(status):
        exits.append(status)
        raise SystemExit(status)

    monkeypatch.setattr(driver, "_exit", exit_)
    with pytest.raises(SystemExit), driver.interruptible():
        signal.raise_signal(signal.SIGINT)
        reached.append("after the first")
        signal.raise_signal(signal.SIGINT)
        reached.append("after the second")
    assert reached == ["after the first"] and exits == [130]
    err = capsys.readouterr().err
    assert "interrupted: stopping at the next check" in err and "again: exiting now (status 130)" in err


def test_outside_the_main_thread_a_guard_installs_nothing():
    handlers, results = [], []

    def work():
        with driver.interruptible():
            handlers.append(signal.getsignal(signal.SIGINT))
            results.append(train())

    before = signal.getsignal(signal.SIGINT)
    thread = threading.Thread(target=work)
    thread.start()
    thread.join(60)
    assert handlers == [before] and results[0]["status"] == "complete"

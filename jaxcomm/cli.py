"""The ``jaxcomm`` command (also ``python -m jaxcomm``)."""

from __future__ import annotations

import argparse
import sys
import time

from jaxcomm.data import DATA_DIR_ENV, DataError
from jaxcomm.population import AUTO, BACKENDS


def _demo(args: argparse.Namespace) -> int:
    from jaxcomm import demo  # pylint: disable=import-outside-toplevel  (keeps --help instant)

    config = demo.DemoConfig(dataset=args.dataset, data_dir=args.data_dir, num_nodes=args.nodes,
                             num_neighbours=args.neighbours, num_steps=args.steps,
                             hidden=tuple(args.hidden), seed=args.seed, num_seeds=args.seeds, backend=args.backend)
    from jaxcomm import driver  # noqa: PLC0415
    from jaxcomm.harness.cli import interrupts  # noqa: PLC0415

    start, seen = time.perf_counter(), []
    try:
        # SIGTERM too stops the demo like Ctrl-C; within the guard a signal at any moment (loading, building,
        # choosing a backend, compiling) stops it at the driver's next check, never inside JAX; one that no
        # check acted on reaches interrupts' handler as the guard ends
        with interrupts(seen), driver.interruptible():
            result = demo.run(config, progress=not args.no_progress)
        if seen:
            raise KeyboardInterrupt(f"signal {seen[0]}")
    except KeyboardInterrupt as error:
        what = str(error) if isinstance(error, demo.Interrupted) else "interrupted"
        print(f"\njaxcomm demo: {what}; no table: the run is incomplete", file=sys.stderr)
        return 130
    print(f"\n{config.num_nodes} MLP nodes ({'-'.join(map(str, (784, *config.hidden, 10)))}), "
          f"{config.num_steps} steps each, ring with {config.num_neighbours} neighbours; "
          f"{result['dataset']}: {result['train_size']} training digits split over the nodes, "
          f"accuracy (%) on {result['test_size']} test digits.\n")
    print(demo.format_table(result))
    print(f"\nmean ± sd over {demo.seeds_text(config)}; wall time {time.perf_counter() - start:.0f} s")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jaxcomm", description=__doc__.splitlines()[0].replace("``", ""))
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser(
        "demo", help="10 MLP nodes on MNIST digits: isolated vs sharing true labels (about a minute on 2 CPU cores)",
        description="Train 10 MLP nodes on disjoint shards of MNIST digits, once isolated and once "
                    "sharing minibatches with true labels over a ring, and print average and "
                    "collective accuracy.")
    demo.add_argument("--dataset", default="mnist_sample", choices=("mnist_sample", "mnist"),
                      help="mnist_sample: 5,000 real digits shipped with jaxcomm (default); mnist: the full set")
    demo.add_argument("--data-dir", default=None,
                      help=f"folder with the MNIST IDX files (for --dataset mnist; default ${DATA_DIR_ENV})")
    demo.add_argument("--nodes", type=int, default=10, help="number of nodes (default 10)")
    demo.add_argument("--neighbours", type=int, default=2, help="ring neighbours per node (default 2)")
    demo.add_argument("--steps", type=int, default=3000, help="training steps per node (default 3000)")
    demo.add_argument("--hidden", type=int, nargs="+", default=[64], help="hidden widths of each MLP (default 64)")
    demo.add_argument("--seed", type=int, default=0, help="first random seed (default 0)")
    demo.add_argument("--seeds", type=int, default=3, help="runs per network, seeds seed.. (default 3)")
    demo.add_argument("--backend", default="auto", choices=(AUTO, *BACKENDS),
                      help="how nodes are run: auto (measured fastest, default), or a backend; 'sharded' "
                           "spreads nodes over all devices, 'patches' batches convolutional nodes as matmuls")
    demo.add_argument("--no-progress", action="store_true", help="no progress bars")
    demo.set_defaults(func=_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        status = args.func(args)
    except (ValueError, DataError) as error:
        print(f"jaxcomm {args.command}: error: {' '.join(str(error).split())}", file=sys.stderr)  # one line
        return 2
    if status == 130 and argv is None:  # from the shell: skip a teardown an interrupted JAX call can crash
        from jaxcomm.harness.cli import exit_interrupted  # noqa: PLC0415

        exit_interrupted()
    return status


if __name__ == "__main__":
    sys.exit(main())

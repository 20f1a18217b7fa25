"""relaxrun: a thin, transparent front end to mpirun.

It adds what running relaxlib jobs needs (``--bind-to none``, ``--oversubscribe`` when one
machine runs more ranks than it has cores, ``--allow-run-as-root`` as root, exporting the
``RELAX_*`` settings to every rank) and otherwise passes everything through; ``--verbose``
prints the exact mpirun command. Scripts equally run under plain ``mpirun``. It takes
horovodrun's options too (horovodrun_options), so ``alias horovodrun=relaxrun`` works.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile

from relaxlib_launch import build_report, horovodrun_options
from relaxlib_launch.hosts import HostError
from relaxlib_launch.mpirun_command import mpirun_argv, mpirun_executable, with_session_base

EXPORTED_PREFIXES = ("RELAX_", "HOROVOD_", "PYTHON", "OMP_", "MKL_")
EXPORTED_NAMES = ("PATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV")


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Parses relaxrun's options; everything after them is the command to run."""
    from relaxlib.auto import LEVELS as AUTO_LEVELS
    parser = argparse.ArgumentParser(
        prog="relaxrun",
        description="Launch a relaxlib training script on N ranks (a front end to mpirun).",
        epilog="Example: relaxrun -np 4 python train.py --epochs 3",
    )
    parser.add_argument("-np", "--num-proc", type=int, help="number of ranks to start")
    parser.add_argument("-H", "--hosts", help="comma-separated host:slots list, e.g. node1:2,node2:2")
    parser.add_argument("--hostfile", help="MPI hostfile (one 'host slots=N' per line)")
    parser.add_argument("--topology", choices=["ring", "random"],
                        help="default neighbour topology of decentralized algorithms (RELAX_TOPOLOGY)")
    parser.add_argument("--fusion-threshold-mb", type=float, help="tensor fusion buffer size (RELAX_FUSION_THRESHOLD)")
    parser.add_argument("--cycle-time-ms", type=float, help="engine cycle time (RELAX_CYCLE_TIME)")
    parser.add_argument("--log-level", help="trace, debug, info, warning, error (RELAX_LOG_LEVEL)")
    parser.add_argument("--stall-check-time", type=float,
                        help="seconds before a stall warning (RELAX_STALL_CHECK_TIME)")
    parser.add_argument("--stall-shutdown-time", type=float,
                        help="seconds before a stalled operation fails (RELAX_STALL_SHUTDOWN_TIME)")
    parser.add_argument("--network-interface", help="restrict MPI's TCP traffic to this interface or subnet")
    parser.add_argument("--advise", action="store_true",
                        help="after --advise-steps training steps print the advisor's table: every relaxation's "
                             "predicted step time on this launch (RELAX_ADVISE)")
    parser.add_argument("--advise-steps", type=int, default=20, help="steps observed before advising (default 20)")
    parser.add_argument("--auto", action="store_true",
                        help="advise (implies --advise), then restart the script with the predicted-fastest mode "
                             "allowed by --auto-allow (RELAX_ALGORITHM)")
    parser.add_argument("--auto-allow", choices=AUTO_LEVELS, default="exact", metavar="LEVEL",
                        help="how far --auto may depart from all-reduce's results: "
                             f"{', '.join(AUTO_LEVELS)} (default exact: all-reduce or DeAR)")
    parser.add_argument("--mpi-args", default="", help="extra arguments passed to mpirun verbatim (quoted)")
    parser.add_argument("-cb", "--check-build", action="store_true",
                        help="print which frameworks and transports are built")
    parser.add_argument("--verbose", action="store_true", help="print the mpirun command before running it")
    horovodrun_options.add_arguments(parser)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the program to run on every rank")
    args = parser.parse_args(argv)
    refused = horovodrun_options.rejection(args)
    if refused:
        parser.error(refused)
    if not (args.check_build or args.version):
        if not args.command:
            parser.error("no command given (e.g. relaxrun -np 2 python train.py)")
        if args.num_proc is None:
            parser.error("-np is required")
        if args.num_proc < 1:
            parser.error("-np must be at least 1")
        if args.hosts and args.hostfile:
            parser.error("use either -H or --hostfile, not both")
        try:  # every host reaches ssh (ours for --start-timeout, Open MPI's launcher): checked first
            horovodrun_options.remote_hosts(args)
        except (HostError, OSError) as error:
            parser.error(str(error))
        elastic = horovodrun_options.elastic_error(args)
        if elastic:
            parser.error(elastic)
        args.advise = args.advise or args.auto
        if args.advise and args.advise_steps < 3:
            parser.error("--advise-steps must be at least 3")
    return args


def relax_environment(args: argparse.Namespace) -> dict[str, str]:
    """RELAX_* variables implied by the command-line options."""
    env = {}
    if args.topology:
        env["RELAX_TOPOLOGY"] = args.topology
    if args.advise:
        env["RELAX_ADVISE"] = str(args.advise_steps)
    if args.fusion_threshold_mb is not None:
        env["RELAX_FUSION_THRESHOLD"] = str(int(args.fusion_threshold_mb * 1024 * 1024))
    if args.cycle_time_ms is not None:
        env["RELAX_CYCLE_TIME"] = str(args.cycle_time_ms)
    if args.log_level:
        env["RELAX_LOG_LEVEL"] = args.log_level
    if args.stall_check_time is not None:
        env["RELAX_STALL_CHECK_TIME"] = str(args.stall_check_time)
    if args.stall_shutdown_time is not None:
        env["RELAX_STALL_SHUTDOWN_TIME"] = str(args.stall_shutdown_time)
    env.update(horovodrun_options.environment(args))
    return env


def mpirun_command(args: argparse.Namespace, environ: dict[str, str]) -> list[str]:
    """The full mpirun command line for ``args``, exporting the relevant variables of ``environ``."""
    binding = shlex.split(args.binding_args) if args.binding_args else ["--bind-to", "none", "--map-by", "slot"]
    mca = {}
    if args.network_interface:
        mca = {"btl_tcp_if_include": args.network_interface, "oob_tcp_if_include": args.network_interface}
    # workers added back (--max-np) need free slots on a local launch, as the first ones do
    most = max(args.num_proc, getattr(args, "max_np", None) or 0)
    oversubscribe = not args.hosts and not args.hostfile and most > (os.cpu_count() or 1)
    return mpirun_argv(args.num_proc, args.command, binding=binding, hosts=args.hosts, hostfile=args.hostfile,
                       oversubscribe=oversubscribe, mca=mca, export=[name for name in sorted(environ)
                                        if name.startswith(EXPORTED_PREFIXES) or name in EXPORTED_NAMES],
                       extra_args=horovodrun_options.mpirun_arguments(args) + shlex.split(args.mpi_args))


def _version() -> str:
    try:
        from relaxlib import _build_info
        return f"relaxlib {_build_info.VERSION}"
    except ImportError:
        return "relaxlib (not built)"


def hosts_answer(args: argparse.Namespace) -> bool:
    """Whether every remote host of -H/--hostfile answers over SSH within --start-timeout (as
    horovodrun checks before launching); names the ones that do not."""
    silent = []
    for host in horovodrun_options.remote_hosts(args):
        try:
            ok = subprocess.run(horovodrun_options.ssh_check_command(host, args), capture_output=True,
                                timeout=args.start_timeout + 5).returncode == 0
        except (subprocess.TimeoutExpired, FileNotFoundError):
            ok = False
        if not ok:
            silent.append(host)
    if silent:
        print(f"relaxrun: hosts {', '.join(silent)} did not answer over SSH within --start-timeout="
              f"{args.start_timeout:g} s; check the host names, that ssh knows their host keys (known_hosts), "
              "-p/--ssh-port and -i/--ssh-identity-file",
              file=sys.stderr)
    return not silent


def main(argv: list[str] | None = None) -> int:
    """Entry point of the relaxrun console script."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.version:
        print(_version())
        return 0
    if args.check_build:
        print(build_report.report())
        return 0
    horovodrun_options.print_notes(args)
    if mpirun_executable() is None:
        print("relaxrun: mpirun not found; install Open MPI (Debian: apt-get install openmpi-bin libopenmpi-dev)",
              file=sys.stderr)
        return 127
    if args.start_timeout is not None and not hosts_answer(args):
        return 1
    environ = dict(os.environ)
    environ.update(relax_environment(args))
    try:
        if args.auto:
            return run_auto(args, environ)
        return run(args, environ)
    except KeyboardInterrupt:
        return 130


def run(args: argparse.Namespace, environ: dict[str, str]) -> int:
    """Runs the job once; returns mpirun's exit code."""
    cmd = mpirun_command(args, environ)
    if args.verbose:
        print("relaxrun: " + shlex.join(cmd), flush=True)
    env = dict(environ)
    if not args.hosts and not args.hostfile:  # other hosts' daemons would make the directory there and leave it
        with_session_base(env)
    return subprocess.call(cmd, env=env)


def run_auto(args: argparse.Namespace, environ: dict[str, str]) -> int:
    """``--auto``: an advising run that ends after the advice, then the real run with the pick."""
    with tempfile.TemporaryDirectory(prefix="relaxrun-auto-") as tmp:
        choice_file = os.path.join(tmp, "choice.json")
        code = run(args, dict(environ, RELAX_AUTO=args.auto_allow, RELAX_AUTO_FILE=choice_file))
        if code != 0:
            return code
        if not os.path.exists(choice_file):
            print("relaxrun --auto: the script ended before the advice (it needs a DistributedOptimizer and more "
                  f"than --advise-steps={args.advise_steps} steps); not restarting", file=sys.stderr)
            return 1
        with open(choice_file) as f:
            choice = json.load(f)
    final = {k: v for k, v in environ.items() if k != "RELAX_ADVISE"}
    final["RELAX_ALGORITHM"] = choice["mode"]
    print(f"relaxrun --auto: running with RELAX_ALGORITHM={choice['mode']}", flush=True)
    return run(args, final)


if __name__ == "__main__":
    sys.exit(main())

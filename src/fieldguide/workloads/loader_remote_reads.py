"""A linear-ish classifier whose samples are fetched one by one from a
(simulated) object store over a socket, in the main process.

Problem: every `__getitem__` is a blocking round trip with ~3 ms latency and
`num_workers=0`, so the training loop spends most of each step waiting on reads. The store
serves connections in parallel, so DataLoader workers (each with its own connection) overlap
their waits: the fix scales with workers.
"""
import os
import socket
import struct
import threading
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-training", "cause": "input.waiting", "modes": ["launch"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
DIM, N_OBJECTS, LATENCY_S = 256, 4096, 0.003


class FakeObjectStore(threading.Thread):
    """Answers GET <key> requests on a local TCP port after a fixed round-trip delay, a thread
    per connection: like a real object store it serves clients in parallel, so readers that
    wait at once (DataLoader workers, each with its own connection) overlap their waits."""

    def __init__(self):
        super().__init__(daemon=True)
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        rows = torch.randn(N_OBJECTS, DIM)
        self._blobs = [struct.pack(f"{DIM}f", *row.tolist()) for row in rows]

    def run(self):
        while True:
            conn, _ = self.server.accept()
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def serve(self, conn):
        try:
            while True:
                key = int.from_bytes(recv_exact(conn, 8), "little")
                time.sleep(LATENCY_S)  # network + storage latency
                conn.sendall(self._blobs[key % N_OBJECTS])
        except (ConnectionError, OSError):
            conn.close()


def recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("object store went away")
        buf += chunk
    return bytes(buf)


class RemoteSamples(Dataset):
    def __init__(self, port):
        self.port, self.sock, self.pid = port, None, None

    def connection(self):
        """This process's own connection to the store (a DataLoader worker opens its own)."""
        if self.sock is None or self.pid != os.getpid():
            self.sock, self.pid = socket.create_connection(("127.0.0.1", self.port)), os.getpid()
        return self.sock

    def __len__(self):
        return 1_000_000

    def __getitem__(self, i):
        sock = self.connection()
        sock.sendall(int(i).to_bytes(8, "little"))
        blob = recv_exact(sock, DIM * 4)
        x = torch.frombuffer(bytearray(blob), dtype=torch.float32)
        return x, int(x[:8].sum() > 0)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # the model is tiny; one intra-op thread is plenty
    store = FakeObjectStore()
    store.start()
    loader = DataLoader(RemoteSamples(store.port), batch_size=16, shuffle=True, num_workers=0)
    model = nn.Sequential(nn.Linear(DIM, 128), nn.ReLU(), nn.Linear(128, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    for step, (x, y) in enumerate(loader):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        now = time.monotonic()
        if now - last_print >= 1.5:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
            last_print = now
        if now >= deadline:
            break


if __name__ == "__main__":
    main()

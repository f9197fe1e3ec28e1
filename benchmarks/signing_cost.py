"""What signatures cost: signing and verifying a model artifact whose pieces are already hashed,
and `pull --dest` with the trust gate (policy check + audit event) against the same pull
without it, side by side in one process over one daemon. The gate's own time inside the pull is
timed too: on a loaded machine the pulls' spread is far wider than what the gate adds.

    .venv/bin/python benchmarks/signing_cost.py [--size-mib 1024] [--piece-mib 16] [--runs 3]
        [--algorithm ed25519|ecdsa-p256] [--workdir DIR]

Stores and destinations go to /dev/shm unless --workdir says otherwise. Pulls with and without
the gate alternate, each going first in every other run, so both see the same machine. Last
line: one JSON object: value = the median gated pull's seconds, baseline = the median plain
pull's, ratio = value / baseline, with the median sign, verify and in-pull gate times, and
gate_share = the gate's time / the plain pull's (the goal: verification adds at most 1% to
`pull --dest`).
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pull_dest import random_model, start_daemon
from shipyard.children import stop
from shipyard.distribute import pull
from shipyard.store import Manifest, PieceStore
from shipyard.trust import gate
from shipyard.trust.keys import generate, load_signing_key, write_key_pair
from shipyard.trust.policy import judge, load_policy
from shipyard.trust.signatures import add_signature, read_signatures, sign
from shipyard.workspace import Workspace


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--size-mib", type=int, default=1024)
    p.add_argument("--piece-mib", type=float, default=16.0)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--algorithm", choices=("ed25519", "ecdsa-p256"), default="ed25519")
    p.add_argument("--workdir", type=Path, help="default: /dev/shm")
    args = p.parse_args()
    parent = args.workdir or (Path("/dev/shm") if Path("/dev/shm").is_dir() else None)
    work = Path(tempfile.mkdtemp(prefix="shipyard-signing-cost-", dir=parent))
    daemon = None
    try:
        os.environ["SHIPYARD_HOME"] = str(work / "home")
        os.environ["SHIPYARD_STORE"] = str(work / "store")
        source = work / "src"
        store, manifest = random_model(source, work / "store", args.size_mib, args.piece_mib)
        shutil.rmtree(source)  # only the store and the pulls' copies need the space
        key_file = work / "keys" / "release"
        public = write_key_pair(generate(args.algorithm), key_file)
        policy = work / "policy.toml"
        policy.write_text(f'signatures = "require"\n[[signer]]\npublic_key = "{public}"\n'
                          'kinds = ["model"]\n')  # fmt: skip
        os.environ["SHIPYARD_TRUST_POLICY"] = str(policy)
        signs = [time_sign(store, manifest, key_file) for _ in range(max(args.runs, 5))]
        verifies = [time_verify(store, manifest) for _ in range(max(args.runs, 5))]
        daemon, port = start_daemon(work / "store")  # its start-up is not what is measured
        ws = Workspace.open()
        read = gate.Read(manifest.id, manifest.id, "pull")

        gate_times: list[float] = []

        def admit(got: Manifest, signatures: bytes | None) -> None:
            started = time.monotonic()
            gate.admit(ws, read, remote=(got, signatures))
            gate_times.append(time.monotonic() - started)

        gated, plain = [], []
        for run in range(args.runs):
            pair = [(admit, gated), (None, plain)]
            for check, times in pair if run % 2 == 0 else pair[::-1]:  # neither always first
                dest = work / f"out{run}-{len(times)}-{check is None}"
                started = time.monotonic()
                pull(("127.0.0.1", port), manifest.id, dest, admit=check)
                times.append(time.monotonic() - started)
                shutil.rmtree(dest)
            print(f"run {run}: gated {gated[-1]:.3f} s, plain {plain[-1]:.3f} s", file=sys.stderr)
        ws.close()
    finally:
        if daemon:
            stop(daemon)
        shutil.rmtree(work, ignore_errors=True)
    value, baseline = statistics.median(gated), statistics.median(plain)
    sign_ms, verify_ms = statistics.median(signs) * 1e3, statistics.median(verifies) * 1e3
    gate_ms = statistics.median(gate_times) * 1e3
    # The gate's own time against the plain pull: what it adds, without the pulls' noise.
    gate_share = gate_ms / 1e3 / baseline
    print(
        f"sign {sign_ms:.2f} ms, verify {verify_ms:.2f} ms, gate in pull {gate_ms:.2f} ms "
        f"({gate_share:.3%} of the plain pull); pull --dest of {args.size_mib} MiB: "
        f"{value:.3f} s gated, {baseline:.3f} s plain, ratio {value / baseline:.4f}"
    )
    print(json.dumps({
        "name": "signing_cost", "value": round(value, 4), "unit": "s",
        "baseline": round(baseline, 4), "ratio": round(value / baseline, 4),
        "sign_ms": round(sign_ms, 3), "verify_ms": round(verify_ms, 3),
        "gate_ms": round(gate_ms, 3), "gate_share": round(gate_share, 6),
        "size_mib": args.size_mib, "algorithm": args.algorithm,
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }))  # fmt: skip


def time_sign(store: PieceStore, manifest: Manifest, key_file: Path) -> float:
    """Load the key, sign the manifest and store the signature file beside it."""
    started = time.monotonic()
    add_signature(store.backend, sign(manifest, [], load_signing_key(key_file)))
    return time.monotonic() - started


def time_verify(store: PieceStore, manifest: Manifest) -> float:
    """Read the policy and the signature file, and check the signature against the policy."""
    started = time.monotonic()
    policy = load_policy()
    assert policy is not None
    stored = read_signatures(store.backend, manifest.id)
    if judge(policy, manifest.id, manifest.kind, None, stored).signer is None:
        raise SystemExit("the signature did not verify")
    return time.monotonic() - started


if __name__ == "__main__":
    main()

"""Re-fetch the map library the panel ships (Leaflet, pinned) from the npm registry and check it.

The panel's map code is Leaflet's own release, never written here. This script downloads the pinned
tarball from registry.npmjs.org, checks the tarball's SHA-512 against the registry's published
integrity and its SHA-256 against the one recorded in ``library.json``, then compares (``--check``,
the default) or replaces (``--write``) the files shipped in ``core/mapsmith/mapview/static/leaflet``.
It never changes the pinned version: bumping it is an edit to ``library.json`` a reviewer sees.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import sys
import tarfile
import urllib.request
from pathlib import Path

STATIC = Path(__file__).resolve().parents[1] / "core" / "mapsmith" / "mapview" / "static" / "leaflet"
PIN = STATIC / "library.json"
# Files taken from the npm package (path inside the tarball -> path under STATIC).
SHIPPED = {
    "package/LICENSE": "LICENSE",
    "package/dist/leaflet.js": "leaflet.js",
    "package/dist/leaflet.css": "leaflet.css",
    "package/dist/images/layers.png": "images/layers.png",
    "package/dist/images/layers-2x.png": "images/layers-2x.png",
    "package/dist/images/marker-icon.png": "images/marker-icon.png",
}


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as response:  # noqa: S310 - a fixed https URL from library.json
        data: bytes = response.read()
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="replace the shipped files (default: only compare)")
    args = parser.parse_args(argv)
    pin = json.loads(PIN.read_text("utf-8"))
    tarball = fetch(pin["tarball"])
    sha512 = "sha512-" + base64.b64encode(hashlib.sha512(tarball).digest()).decode("ascii")
    sha256 = hashlib.sha256(tarball).hexdigest()
    problems = []
    if sha512 != pin["integrity"]:
        problems.append(f"tarball integrity {sha512} is not the registry's {pin['integrity']}")
    if sha256 != pin["tarball_sha256"]:
        problems.append(f"tarball sha256 {sha256} is not the recorded {pin['tarball_sha256']}")
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as tar:
        for member, target in SHIPPED.items():
            extracted = tar.extractfile(member)
            if extracted is None:
                print(f"{member} is missing from the tarball", file=sys.stderr)
                return 1
            data = extracted.read()
            digest = hashlib.sha256(data).hexdigest()
            recorded = pin["files"].get(target)
            path = STATIC / target
            if args.write:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
                pin["files"][target] = digest
            elif recorded != digest or not path.exists() or hashlib.sha256(path.read_bytes()).hexdigest() != digest:
                problems.append(f"{target}: shipped file or recorded sha256 differs from the release ({digest})")
    if args.write:
        PIN.write_text(json.dumps(pin, indent=2) + "\n", "utf-8")
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    print(f"leaflet {pin['version']}: tarball and {len(SHIPPED)} shipped files match ({sha256})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

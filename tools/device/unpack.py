"""Unpacks pack.sh's parts (PARTS_DIR/site.part00, 01, ... read as one zstd stream) into
SITE. Needs only `zstandard` (its wheel travels in the last part).
    python3 tools/device/unpack.py PARTS_DIR SITE"""
import glob
import sys
import tarfile

import zstandard


class Parts:
    """The parts, read as one stream."""

    def __init__(self, names):
        self.files = [open(name, "rb") for name in names]  # pylint: disable=consider-using-with

    def read(self, n=-1):
        out = b""
        while self.files and (n < 0 or len(out) < n):
            chunk = self.files[0].read(-1 if n < 0 else n - len(out))
            if not chunk:
                self.files.pop(0).close()
                continue
            out += chunk
        return out


names = sorted(glob.glob(f"{sys.argv[1]}/site.part*"))
print("parts:", len(names), flush=True)
reader = zstandard.ZstdDecompressor(max_window_size=2**31).stream_reader(Parts(names))
tarfile.open(fileobj=reader, mode="r|").extractall(sys.argv[2])

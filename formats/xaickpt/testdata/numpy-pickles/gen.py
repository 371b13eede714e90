"""Reference pickles for the xaickpt tests, written by real numpy.

Run with numpy 1.24 (Debian 12's python3-numpy) and Python 3.11:
    /usr/bin/python3 gen.py
Small pickles are stored as files; for the large ones (payloads of 64 KiB
or more, which test protocol 4/5 framing) only their SHA-256 is stored, in
large.sha256, and the Go test rebuilds them with its writer.

Array contents are deterministic: byte i of an array is (31*i + 7) % 251.
"""
import hashlib
import pickle
import sys
from dataclasses import dataclass

import numpy as np

# checkpoint.py unpickles QuantizedWeight8bit from __main__; pickling it from
# a script defined in __main__ writes the same GLOBAL.
@dataclass
class QuantizedWeight8bit:
    weight: np.ndarray
    scales: np.ndarray


def arr(shape, dtype, writeable=True):
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    a = np.frombuffer(bytes((31 * i + 7) % 251 for i in range(n)), dtype=dtype).reshape(shape).copy()
    a.flags.writeable = writeable
    return a


def objects():
    yield "float", arr((3, 5), "<f4")
    # weight writable, scales read-only: protocol 5 writes BYTEARRAY8 and
    # SHORT_BINBYTES/BINBYTES in one file.
    yield "quant", QuantizedWeight8bit(arr((16, 6), "i1"), arr((8, 6), "<u2", writeable=False))
    yield "bigfloat", arr((130, 128), "<f4")
    yield "bigquant", QuantizedWeight8bit(arr((2, 256, 160), "i1"), arr((2, 8, 160), "<u2", writeable=False))


large = []
for name, obj in objects():
    for proto in (3, 4, 5):
        data = pickle.dumps(obj, protocol=proto)
        fname = f"{name}.p{proto}"
        if name.startswith("big"):
            large.append(f"{hashlib.sha256(data).hexdigest()}  {fname}  {len(data)}\n")
        else:
            open(fname, "wb").write(data)
for proto in (4, 5):
    open(f"fortran.p{proto}", "wb").write(pickle.dumps(np.asfortranarray(arr((2, 3), "<f4")), protocol=proto))
open("bigendian.p4", "wb").write(pickle.dumps(arr((3,), ">f4"), protocol=4))
open("float.p2", "wb").write(pickle.dumps(arr((3, 5), "<f4"), protocol=2))
open("large.sha256", "w").write("".join(large))
print(np.__version__, sys.version)

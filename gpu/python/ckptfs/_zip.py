"""_zip.py — the layout of a zip archive as torch.save writes it: stored
(uncompressed) entries whose data starts on a 64-byte boundary (padding in
an "FB" extra field, as PyTorch's writer does), a central directory, and the
zip64 end records (always, like torch; zip64 extra fields where a size or an
offset needs them).

The whole layout is computed up front from the entries' sizes, so captured
data can be copied straight to its final offset while the headers are
written afterwards.  An entry's CRC-32 is either known (bytes written by
Python) or comes later from the capture (libckptfs patches it in both the
local header and the central directory).
"""
import struct
import zlib

ALIGN = 64
_NEED = 45  # version needed: zip64
_LOCAL = struct.Struct("<IHHHHHIIIHH")
_CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")
_EOCD64 = struct.Struct("<IQHHIIQQQQ")
_LOCATOR = struct.Struct("<IIQI")
_EOCD = struct.Struct("<IHHHHIIH")
_DOS_DATE = 0x21  # 1980-01-01
_MAX32 = 0xFFFFFFFF


class Entry:
    """One record: name, size, and its bytes (None: captured)."""

    def __init__(self, name, size, data=None):
        self.name = name.encode()
        self.size = size
        self.data = data
        self.crc = zlib.crc32(data) & _MAX32 if data is not None else 0
        self.header_offset = 0
        self.data_offset = 0
        self.local = b""
        self.local_crc_at = 0    # file offset of the local header's CRC field
        self.central_crc_at = 0  # likewise in the central directory


def _zip64_extra(*values):
    return struct.pack("<HH", 1, 8 * len(values)) + b"".join(struct.pack("<Q", v) for v in values)


def _local_header(e, offset):
    big = e.size >= _MAX32
    extra = _zip64_extra(e.size, e.size) if big else b""
    base = offset + _LOCAL.size + len(e.name) + len(extra)
    pad = (-(base + 4)) % ALIGN
    extra += struct.pack("<HH", 0x4246, pad) + b"Z" * pad  # "FB": PyTorch's alignment field
    size32 = _MAX32 if big else e.size
    return _LOCAL.pack(0x04034B50, _NEED, 0, 0, 0, _DOS_DATE, e.crc, size32, size32,
                       len(e.name), len(extra)) + e.name + extra


def layout(entries):
    """Place entries; returns (total size, central directory bytes, its offset)."""
    off = 0
    for e in entries:
        e.header_offset = off
        e.local = _local_header(e, off)
        e.local_crc_at = off + 14
        e.data_offset = off + len(e.local)
        off = e.data_offset + e.size
    cd_offset = off
    central = bytearray()
    for e in entries:
        big, far = e.size >= _MAX32, e.header_offset >= _MAX32
        values = ([e.size, e.size] if big else []) + ([e.header_offset] if far else [])
        extra = _zip64_extra(*values) if values else b""
        e.central_crc_at = cd_offset + len(central) + 16
        size32 = _MAX32 if big else e.size
        central += _CENTRAL.pack(0x02014B50, _NEED, _NEED, 0, 0, 0, _DOS_DATE, e.crc, size32,
                                 size32, len(e.name), len(extra), 0, 0, 0, 0,
                                 _MAX32 if far else e.header_offset) + e.name + extra
    cd_size = len(central)
    eocd64_at = cd_offset + cd_size
    n = len(entries)
    central += _EOCD64.pack(0x06064B50, _EOCD64.size - 12, _NEED, _NEED, 0, 0, n, n,
                            cd_size, cd_offset)
    central += _LOCATOR.pack(0x07064B50, 0, eocd64_at, 1)
    central += _EOCD.pack(0x06054B50, 0, 0, min(n, 0xFFFF), min(n, 0xFFFF),
                          min(cd_size, _MAX32), min(cd_offset, _MAX32), 0)
    return cd_offset + len(central), bytes(central), cd_offset

"""Byte-comparable encodings: the pieces from which ``comparable_bytes`` is built.

Owns the rule that makes storage order cheap: every comparable CQL value gets an encoding ``E``
such that for two valid values ``a`` and ``b`` of one type, ``E(a)`` and ``E(b)`` compare as
unsigned byte strings (``memcmp``, shorter-is-smaller) exactly as the type's comparator
compares ``a`` and ``b``, and ``E`` is *prefix-free*: no encoding of a type is a proper prefix of
another encoding of that type. Prefix-freedom is what lets encodings be concatenated (tuples,
collections, clustering keys) and bit-inverted (DESC clustering columns) without breaking order:
two different encodings always differ at a byte inside both of them. Values the comparator calls
equal (``1.0`` and ``1.00`` as decimals, two NaN bit patterns) get equal encodings.

The layouts follow the idea of Cassandra's ``ByteComparable`` (CASSANDRA-6936,
``utils/bytecomparable/ByteComparable.md``) but are ringflow's own:

* fixed-width signed integers: sign bit flipped; floats: IEEE-754 transform with NaN canonical;
* byte strings: ``0x00`` escaped as ``0x00 0xFF``, terminated by ``0x00 0x00``;
* varint: a sign byte, then (for non-zero) an order-preserving length and the magnitude, the
  whole inverted for negatives;
* decimal: a sign byte, then the decimal exponent and the packed digit pairs, inverted for
  negatives;
* sequences: each element or component behind ``NEXT_COMPONENT`` (a null tuple component is
  ``NULL_COMPONENT``, an empty value ``EMPTY_COMPONENT`` alone: the tolerant codecs of
  ``_codec`` encode an empty value as ``b""``, which no value of any type otherwise encodes to),
  collections closed by ``END_OF_SEQUENCE``; a clustering key is its
  components each behind ``NEXT_COMPONENT``. For a DESC clustering column only the component's
  own encoding is inverted, never the marker in front of it, so "another component follows"
  stays above "the key ends here" and ``AFTER_PREFIX`` stays above every extension of a prefix.
"""

from __future__ import annotations

import struct

NULL_COMPONENT = b"\x3e"
"""Marks a null tuple/UDT component: sorts before any value (Cassandra ``TupleType`` order)."""
EMPTY_COMPONENT = b"\x3f"
"""Marks an empty (zero-byte) value of a type that has one (``int``, ``uuid``, ...; their own
encodings are never empty): sorts before any other value, after a null (Cassandra's
``AbstractType`` comparators put an empty value first)."""
EMPTY_COMPONENT_DESC = b"\x41"
"""An empty value of a DESC clustering column: after every other value of the column."""
NEXT_COMPONENT = b"\x40"
"""Precedes every present component of a tuple, collection or clustering key."""
END_OF_SEQUENCE = b"\x20"
"""Ends a collection: lower than ``NEXT_COMPONENT``, so a list sorts before its extensions."""
AFTER_PREFIX = b"\x60"
"""Appended to an encoded clustering prefix: higher than every continuation of that prefix."""

INVERT = bytes(255 - byte for byte in range(256))
"""``bytes.translate`` table flipping every bit (DESC components, negative numbers)."""

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_TWO_U64 = struct.Struct(">QQ")
_FLIP_SIGN = bytes(byte ^ 0x80 for byte in range(256))
_SIGN_64 = 1 << 63
_DIGIT_PAIRS = {f"{pair:02d}": bytes((pair + 1,)) for pair in range(100)}
_DECIMAL_END = b"\x00"
_NEGATIVE, _ZERO, _POSITIVE = b"\x01", b"\x02", b"\x03"
# Python refuses int->str beyond 4300 digits; larger magnitudes take the decimal module's path.
_STR_SAFE_BITS = 14_000


def escaped(data: bytes) -> bytes:
    """Unsigned lexicographic order for a variable-length byte string, made prefix-free."""
    return data.replace(b"\x00", b"\x00\xff") + b"\x00\x00"


def signed_fixed(data: bytes) -> bytes:
    """Two's-complement big-endian integer of any fixed width: flip the sign bit."""
    return data[:1].translate(_FLIP_SIGN) + data[1:]


def float32(data: bytes) -> bytes:
    """Java ``Float.compare`` order: -0.0 < 0.0, every NaN equal and above +infinity."""
    (bits,) = _U32.unpack(data)
    if bits & 0x7FFF_FFFF > 0x7F80_0000:
        bits = 0x7FC0_0000
    return _U32.pack(bits ^ 0xFFFF_FFFF if bits & 0x8000_0000 else bits | 0x8000_0000)


def float64(data: bytes) -> bytes:
    """Java ``Double.compare`` order, as :func:`float32` for binary64."""
    (bits,) = _U64.unpack(data)
    if bits & 0x7FFF_FFFF_FFFF_FFFF > 0x7FF0_0000_0000_0000:
        bits = 0x7FF8_0000_0000_0000
    return _U64.pack(bits ^ 0xFFFF_FFFF_FFFF_FFFF if bits & _SIGN_64 else bits | _SIGN_64)


def _unsigned_length(length: int) -> bytes:
    """Order-preserving, self-delimiting unsigned int: byte count, then the minimal bytes."""
    width = (length.bit_length() + 7) // 8
    return bytes((width,)) + length.to_bytes(width, "big")


def integer(value: int) -> bytes:
    """Numeric order for an unbounded integer (CQL varint)."""
    if value == 0:
        return _ZERO
    magnitude = -value if value < 0 else value
    width = (magnitude.bit_length() + 7) // 8
    body = _unsigned_length(width) + magnitude.to_bytes(width, "big")
    if value < 0:
        return _NEGATIVE + body.translate(INVERT)
    return _POSITIVE + body


def decimal(unscaled: int, scale: int) -> bytes:
    """Numeric order for ``unscaled * 10**-scale`` (CQL decimal); trailing zeros do not count.

    Layout after the sign byte: the exponent ``e`` with ``value = 0.d1d2d3... * 10**e``
    (``d1`` non-zero) as a biased 64-bit integer, then the digits in pairs (each pair ``p`` as
    byte ``p + 1``, the last pair zero-padded) and a ``0x00`` terminator. Comparing exponents
    first and then digit strings (shorter is smaller, as the missing digits are zeros) is
    numeric order for positives; negatives invert the body.
    """
    if unscaled == 0:
        return _ZERO
    magnitude = -unscaled if unscaled < 0 else unscaled
    digits = _digits(magnitude)
    significant = digits.rstrip("0")
    exponent = len(digits) - scale
    if len(significant) % 2:
        significant += "0"
    pairs = b"".join([_DIGIT_PAIRS[significant[i : i + 2]] for i in range(0, len(significant), 2)])
    body = _U64.pack(exponent + _SIGN_64) + pairs + _DECIMAL_END
    if unscaled < 0:
        return _NEGATIVE + body.translate(INVERT)
    return _POSITIVE + body


def _digits(magnitude: int) -> str:
    if magnitude.bit_length() < _STR_SAFE_BITS:
        return str(magnitude)
    from decimal import Decimal  # only for magnitudes past Python's int->str digit limit

    return str(Decimal(magnitude))


def reordered_time_msb(msb: int) -> int:
    """A version-1 UUID's high 64 bits with the timestamp fields most-significant first.

    ``time_hi_and_version | time_mid | time_low`` (Cassandra ``TimeUUIDType.reorderTimestamp
    Bytes``): the version nibble lands on top, then the 60-bit timestamp in order.
    """
    return ((msb & 0xFFFF) << 48) | (((msb >> 16) & 0xFFFF) << 32) | (msb >> 32)


def uuid(data: bytes) -> bytes:
    """Cassandra ``UUIDType`` order: version, then timestamp (v1) or high bits, then low bits.

    The version nibble moves to the top so a plain unsigned comparison sees it first (the same
    swizzle as ``UUIDType.asComparableBytes``); low 64 bits compare unsigned.
    """
    msb, lsb = _TWO_U64.unpack(data)
    version = (msb >> 12) & 0xF
    if version == 1:
        high = reordered_time_msb(msb)
    else:
        high = (version << 60) | ((msb >> 4) & 0x0FFF_FFFF_FFFF_F000) | (msb & 0xFFF)
    return _TWO_U64.pack(high, lsb)


SIGNED_BYTES_FLIP = 0x8080_8080_8080_8080
"""XOR turning a signed-bytes comparison of 8 bytes into an unsigned 64-bit comparison."""


def timeuuid(data: bytes) -> bytes:
    """Cassandra ``TimeUUIDType`` / Scylla ``timeuuid_tri_compare`` order: timestamp, then the
    low 8 bytes compared as *signed* bytes (scylla-cdc.md §5 "Timeuuid compare")."""
    msb, lsb = _TWO_U64.unpack(data)
    return _TWO_U64.pack(reordered_time_msb(msb), lsb ^ SIGNED_BYTES_FLIP)

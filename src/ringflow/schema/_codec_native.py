"""Codecs of the native CQL types.

Owns, for each native type: the Python values it accepts, its serialized form (native protocol
v4 §6, ``doc/native_protocol_v4.spec``; ``duration`` from protocol v5 §6), the Python value it
deserializes to, the validation of serialized bytes, its comparator (Cassandra's
``db/marshal/*Type.java`` order, as a Python sort key) and its byte-comparable form
(``_comparable``). The accepted and returned Python values are listed in ``_codec``'s docstring.

Inner functions raise ``Rejection`` with a reason naming the offending value; the public
methods of ``Codec`` (``_codec_base``) turn it into ``InvalidValue`` naming column and type.
Empty (zero-length) values, which Cassandra tolerates for legacy Thrift reasons, are rejected for
every type whose valid values are never empty.
"""

from __future__ import annotations

import datetime
import decimal
import ipaddress
import math
import numbers
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from ringflow.schema import _comparable
from ringflow.schema._codec_base import (
    Codec,
    Rejection,
    SortKey,
    as_int,
    in_range,
    native_codec,
    show,
    show_bytes,
    size_checker,
    unorderable,
    wrong_size,
    wrong_type,
)
from ringflow.schema._comparable import signed_fixed
from ringflow.schema._comparable import timeuuid as timeuuid_comparable
from ringflow.schema._errors import InvalidValue

# --- fixed-width integers: tinyint, smallint, int, bigint -----------------------------------


def _fixed_integer(name: str, fmt: str) -> Codec:
    packer = struct.Struct(fmt)
    size, bits = packer.size, packer.size * 8
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    check = size_checker(size)
    unpack = packer.unpack

    def encode(value: object) -> bytes:
        return packer.pack(in_range(as_int(value), low, high))

    def decode(data: bytes) -> int:
        if len(data) != size:
            raise wrong_size(size, data)
        result: int = unpack(data)[0]
        return result

    def comparable(data: bytes) -> bytes:
        if len(data) != size:
            raise wrong_size(size, data)
        return signed_fixed(data)

    return native_codec(name, encode, decode, check, decode, comparable)


# --- varint and decimal ---------------------------------------------------------------------

_INT32 = struct.Struct(">i")
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def varint_bytes(value: int) -> bytes:
    """Minimal two's-complement big-endian bytes (native protocol v4 §6.23)."""
    width = ((value if value >= 0 else ~value).bit_length() + 8) // 8
    return value.to_bytes(width, "big", signed=True)


def _varint_value(data: bytes) -> int:
    if not data:
        raise Rejection("a varint needs at least 1 byte, got 0")
    return int.from_bytes(data, "big", signed=True)


def _varint_check(data: bytes) -> None:
    _varint_value(data)


def _varint_encode(value: object) -> bytes:
    return varint_bytes(as_int(value))


def _varint_comparable(data: bytes) -> bytes:
    return _comparable.integer(_varint_value(data))


_EXACT = decimal.Context(prec=decimal.MAX_PREC, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)


def _decimal_parts(data: bytes) -> tuple[int, int]:
    """(unscaled, scale) of serialized decimal bytes."""
    if len(data) < 5:
        raise Rejection(f"a decimal needs a 4-byte scale and a varint, got {show_bytes(data)}")
    return int.from_bytes(data[4:], "big", signed=True), _INT32.unpack_from(data, 0)[0]


def _decimal_of(value: object) -> decimal.Decimal:
    if isinstance(value, decimal.Decimal):
        return value
    if isinstance(value, float):
        return decimal.Decimal(value)  # exact binary value, like the Python driver
    return decimal.Decimal(as_int(value, "decimal.Decimal or int"))


def _decimal_encode(value: object) -> bytes:
    number = _decimal_of(value)
    if not number.is_finite():
        raise Rejection(f"{show(value)} is not a finite number")
    sign, digits, exponent = number.as_tuple()
    assert isinstance(exponent, int)  # finite, so never 'n', 'N' or 'F'
    unscaled = int(decimal.Decimal((sign, digits, 0)))
    scale = -exponent
    if not _INT32_MIN <= scale <= _INT32_MAX:
        raise Rejection(f"{show(value)} has scale {scale}, outside the 32-bit range")
    return _INT32.pack(scale) + varint_bytes(unscaled)


def _decimal_decode(data: bytes) -> decimal.Decimal:
    unscaled, scale = _decimal_parts(data)
    return decimal.Decimal(unscaled).scaleb(-scale, _EXACT)


def _decimal_check(data: bytes) -> None:
    _decimal_parts(data)


def _decimal_comparable(data: bytes) -> bytes:
    return _comparable.decimal(*_decimal_parts(data))


# --- float and double -------------------------------------------------------------------------


def _float_codec(name: str, fmt: str, to_comparable: Callable[[bytes], bytes]) -> Codec:
    packer = struct.Struct(fmt)
    check = size_checker(packer.size)

    def encode(value: object) -> bytes:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise wrong_type(value, "float")
        try:
            return packer.pack(float(value))
        except OverflowError:
            raise Rejection(f"{show(value)} is out of range for a {name}") from None

    def decode(data: bytes) -> float:
        check(data)
        result: float = packer.unpack(data)[0]
        return result

    def sort_key(data: bytes) -> SortKey:
        # Java Float.compare / Double.compare: -0.0 < 0.0, NaN equal to itself and largest.
        number = decode(data)
        if math.isnan(number):
            return (1, 0.0, 0)
        return (0, number, 0 if math.copysign(1.0, number) < 0 else 1)

    def comparable(data: bytes) -> bytes:
        check(data)
        return to_comparable(data)

    return native_codec(name, encode, decode, check, sort_key, comparable)


# --- ascii, text, blob, inet ----------------------------------------------------------------


def _ascii_encode(value: object) -> bytes:
    if not isinstance(value, str):
        raise wrong_type(value, "str")
    if not value.isascii():
        position, char = next((i, c) for i, c in enumerate(value) if ord(c) > 127)
        raise Rejection(f"{show(value)} has non-ASCII character {char!r} at index {position}")
    return value.encode("ascii")


def _ascii_decode(data: bytes) -> str:
    if not data.isascii():
        position = next(i for i, byte in enumerate(data) if byte > 127)
        raise Rejection(f"byte 0x{data[position]:02x} at index {position} is not 7-bit ASCII")
    return data.decode("ascii")


def _ascii_check(data: bytes) -> None:
    _ascii_decode(data)


def _text_encode(value: object) -> bytes:
    if not isinstance(value, str):
        raise wrong_type(value, "str")
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise Rejection(f"{show(value)} is not encodable as UTF-8: {error.reason}") from None


def _text_decode(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise Rejection(
            f"{show_bytes(data)} is not valid UTF-8 at index {error.start}: {error.reason}"
        ) from None


def _text_check(data: bytes) -> None:
    _text_decode(data)


def _blob_encode(value: object) -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise wrong_type(value, "bytes")
    return bytes(value)


def _blob_decode(data: bytes) -> bytes:
    return bytes(data)


def _no_check(data: bytes) -> None:
    return None


def _raw_key(data: bytes) -> bytes:
    return bytes(data)


InetAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def _inet_encode(value: object) -> bytes:
    if isinstance(value, ipaddress.IPv4Address | ipaddress.IPv6Address):
        return value.packed
    if not isinstance(value, str):
        raise wrong_type(value, "ipaddress.IPv4Address, IPv6Address or str")
    try:
        return ipaddress.ip_address(value).packed
    except ValueError:
        raise Rejection(f"{show(value)} is not an IPv4 or IPv6 address") from None


def _inet_decode(data: bytes) -> InetAddress:
    _inet_check(data)
    if len(data) == 4:
        return ipaddress.IPv4Address(bytes(data))
    return ipaddress.IPv6Address(bytes(data))


def _inet_check(data: bytes) -> None:
    if len(data) not in (4, 16):
        raise Rejection(f"an inet is 4 or 16 bytes, got {show_bytes(data)}")


def _inet_comparable(data: bytes) -> bytes:
    _inet_check(data)
    return _comparable.escaped(data)


# --- boolean ------------------------------------------------------------------------------

_check_one_byte = size_checker(1)


def _boolean_encode(value: object) -> bytes:
    if not isinstance(value, bool):
        raise wrong_type(value, "bool")
    return b"\x01" if value else b"\x00"


def _boolean_decode(data: bytes) -> bool:
    _check_one_byte(data)
    return data[0] != 0  # any non-zero byte is true (protocol v4 §6.4)


def _boolean_comparable(data: bytes) -> bytes:
    return b"\x01" if _boolean_decode(data) else b"\x00"


# --- timestamp, date, time --------------------------------------------------------------------

_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")
_check_eight = size_checker(8)
_check_four = size_checker(4)
EPOCH = datetime.datetime(1970, 1, 1)
EPOCH_DATE = datetime.date(1970, 1, 1)
_ONE_MS = datetime.timedelta(milliseconds=1)
_DATETIME_MS_MIN = (datetime.datetime.min - EPOCH) // _ONE_MS
_DATETIME_MS_MAX = (datetime.datetime.max - EPOCH) // _ONE_MS
_DATE_DAYS_MIN = (datetime.date.min - EPOCH_DATE).days
_DATE_DAYS_MAX = (datetime.date.max - EPOCH_DATE).days
DATE_EPOCH_OFFSET = 2**31
TIME_NS_MAX = 86_399_999_999_999


def _timestamp_ms(value: object) -> int:
    if isinstance(value, datetime.datetime):
        offset = value.utcoffset()
        naive = value.replace(tzinfo=None) - offset if offset is not None else value
        return (naive - EPOCH) // _ONE_MS  # floor, like the driver: -1 µs is -1 ms
    if isinstance(value, datetime.date):
        return (value - EPOCH_DATE).days * 86_400_000
    return in_range(as_int(value, "datetime.datetime or int ms"), _INT64_MIN, _INT64_MAX)


def _timestamp_encode(value: object) -> bytes:
    return _INT64.pack(_timestamp_ms(value))


def _int64_decode(data: bytes) -> int:
    _check_eight(data)
    result: int = _INT64.unpack(data)[0]
    return result


def _timestamp_decode(data: bytes) -> datetime.datetime | int:
    milliseconds = _int64_decode(data)
    if _DATETIME_MS_MIN <= milliseconds <= _DATETIME_MS_MAX:
        return EPOCH + datetime.timedelta(milliseconds=milliseconds)
    return milliseconds


def _signed64_comparable(data: bytes) -> bytes:
    if len(data) != 8:
        raise wrong_size(8, data)
    return signed_fixed(data)


def _date_days(value: object) -> int:
    if isinstance(value, datetime.datetime):
        raise wrong_type(value, "datetime.date (not datetime) or int days since epoch")
    if isinstance(value, datetime.date):
        return (value - EPOCH_DATE).days
    days = getattr(value, "days_from_epoch", None)  # the Python driver's util.Date
    expected = "datetime.date or int days since epoch"
    return in_range(as_int(value if days is None else days, expected), _INT32_MIN, _INT32_MAX)


def _date_encode(value: object) -> bytes:
    return _UINT32.pack(_date_days(value) + DATE_EPOCH_OFFSET)


def _date_decode(data: bytes) -> datetime.date | int:
    _check_four(data)
    days = _UINT32.unpack(data)[0] - DATE_EPOCH_OFFSET
    if _DATE_DAYS_MIN <= days <= _DATE_DAYS_MAX:
        return EPOCH_DATE + datetime.timedelta(days=days)
    return int(days)


def _date_key(data: bytes) -> int:
    _check_four(data)
    result: int = _UINT32.unpack(data)[0]
    return result


def _date_comparable(data: bytes) -> bytes:
    _check_four(data)
    return bytes(data)


def _time_ns(value: object) -> int:
    if isinstance(value, datetime.time):
        if value.utcoffset() is not None:
            raise Rejection(f"{show(value)} has a time zone; a CQL time has none")
        seconds = (value.hour * 60 + value.minute) * 60 + value.second
        return seconds * 1_000_000_000 + value.microsecond * 1000
    nanoseconds = getattr(value, "nanosecond_time", None)  # the Python driver's util.Time
    expected = "datetime.time or int ns since midnight"
    return in_range(as_int(value if nanoseconds is None else nanoseconds, expected), 0, TIME_NS_MAX)


def _time_encode(value: object) -> bytes:
    return _INT64.pack(_time_ns(value))


def _time_value(data: bytes) -> int:
    return in_range(_int64_decode(data), 0, TIME_NS_MAX)


def _time_decode(data: bytes) -> datetime.time | int:
    nanoseconds = _time_value(data)
    if nanoseconds % 1000:
        return nanoseconds  # datetime.time cannot hold it exactly
    microseconds = nanoseconds // 1000
    seconds, microsecond = divmod(microseconds, 1_000_000)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return datetime.time(hour, minute, second, microsecond)


def _time_check(data: bytes) -> None:
    _time_value(data)


# --- uuid, timeuuid -----------------------------------------------------------------------

_check_sixteen = size_checker(16)
_TWO_U64 = struct.Struct(">QQ")


def _uuid_encode(value: object) -> bytes:
    if not isinstance(value, uuid.UUID):
        raise wrong_type(value, "uuid.UUID")
    return value.bytes


def _uuid_decode(data: bytes) -> uuid.UUID:
    _check_sixteen(data)
    return uuid.UUID(bytes=bytes(data))


def _uuid_key(data: bytes) -> SortKey:
    """Cassandra 4.x ``UUIDType.compareCustom``: version; then for version 1 the timestamp,
    otherwise the high 64 bits unsigned; then the low 64 bits unsigned."""
    _check_sixteen(data)
    msb, lsb = _TWO_U64.unpack(data)
    version = (msb >> 12) & 0xF
    high = _comparable.reordered_time_msb(msb) if version == 1 else msb
    return (version, high, lsb)


def _uuid_comparable(data: bytes) -> bytes:
    if len(data) != 16:
        raise wrong_size(16, data)
    return _comparable.uuid(data)


def _timeuuid_check(data: bytes) -> None:
    _check_sixteen(data)
    if data[6] >> 4 != 1:
        raise Rejection(f"{uuid.UUID(bytes=bytes(data))} is a version {data[6] >> 4} UUID")


def _timeuuid_encode(value: object) -> bytes:
    data = _uuid_encode(value)
    if data[6] >> 4 != 1:
        raise Rejection(f"{value} is a version {data[6] >> 4} UUID, a timeuuid is version 1")
    return data


def _timeuuid_decode(data: bytes) -> uuid.UUID:
    _timeuuid_check(data)
    return uuid.UUID(bytes=bytes(data))


def _timeuuid_key(data: bytes) -> SortKey:
    """``TimeUUIDType``: the 60-bit timestamp, then the low 8 bytes as signed bytes."""
    _check_sixteen(data)
    msb, lsb = _TWO_U64.unpack(data)
    return (_comparable.reordered_time_msb(msb), lsb ^ _comparable.SIGNED_BYTES_FLIP)


def _timeuuid_comparable(data: bytes) -> bytes:
    if len(data) != 16:
        raise wrong_size(16, data)
    return timeuuid_comparable(data)


# --- duration -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Duration:
    """A CQL ``duration``: months, days and nanoseconds, all of one sign (Cassandra
    ``cql3/Duration.java``). Months and days are 32-bit, nanoseconds 64-bit; a value breaking
    those rules raises ``InvalidValue``."""

    months: int = 0
    days: int = 0
    nanoseconds: int = 0

    def __post_init__(self) -> None:
        parts = (self.months, self.days, self.nanoseconds)
        if any(isinstance(part, bool) or not isinstance(part, int) for part in parts):
            raise InvalidValue(f"{self!r}: months, days and nanoseconds must be int")
        if not (_INT32_MIN <= self.months <= _INT32_MAX and _INT32_MIN <= self.days <= _INT32_MAX):
            raise InvalidValue(f"{self!r}: months and days must fit in 32 bits")
        if not _INT64_MIN <= self.nanoseconds <= _INT64_MAX:
            raise InvalidValue(f"{self!r}: nanoseconds must fit in 64 bits")
        if min(parts) < 0 < max(parts):
            raise InvalidValue(f"{self!r}: months, days and nanoseconds must have the same sign")


def _zigzag(value: int) -> int:
    return value * 2 if value >= 0 else -value * 2 - 1


def write_unsigned_vint(value: int) -> bytes:
    """Cassandra ``VIntCoding.writeUnsignedVInt``: the count of extra bytes as leading 1-bits."""
    size = min(9, (max(value.bit_length(), 1) + 6) // 7)
    if size == 9:
        return b"\xff" + value.to_bytes(8, "big")
    encoded = bytearray(value.to_bytes(size, "big"))
    encoded[0] |= (0xFF << (9 - size)) & 0xFF
    return bytes(encoded)


def read_unsigned_vint(data: bytes, position: int) -> tuple[int, int]:
    """(value, next position); rejects truncated input."""
    if position >= len(data):
        raise Rejection(f"truncated vint in {show_bytes(data)}")
    first = data[position]
    extra = 8 - (~first & 0xFF).bit_length()
    end = position + 1 + extra
    if end > len(data):
        raise Rejection(f"truncated vint in {show_bytes(data)}")
    value = first & (0xFF >> extra)
    for byte in data[position + 1 : end]:
        value = (value << 8) | byte
    return value, end


def _duration_encode(value: object) -> bytes:
    if not isinstance(value, Duration):
        try:
            parts = (value.months, value.days, value.nanoseconds)  # type: ignore[attr-defined]
        except AttributeError:
            raise wrong_type(value, "Duration") from None
        try:
            value = Duration(*parts)
        except InvalidValue as error:
            raise Rejection(str(error)) from None
    assert isinstance(value, Duration)
    parts = (value.months, value.days, value.nanoseconds)
    return b"".join([write_unsigned_vint(_zigzag(part)) for part in parts])


def _duration_decode(data: bytes) -> Duration:
    parts = []
    position = 0
    for _ in range(3):
        raw, position = read_unsigned_vint(data, position)
        parts.append((raw >> 1) ^ -(raw & 1))
    if position != len(data):
        raise Rejection(f"{len(data) - position} bytes after the duration in {show_bytes(data)}")
    try:
        return Duration(*parts)
    except InvalidValue as error:
        raise Rejection(str(error)) from None


def _duration_check(data: bytes) -> None:
    _duration_decode(data)


# --- the table ------------------------------------------------------------------------------


def _build_natives() -> dict[str, Codec]:
    escaped = _comparable.escaped
    signed64 = _signed64_comparable
    codecs = [
        _fixed_integer("tinyint", ">b"),
        _fixed_integer("smallint", ">h"),
        _fixed_integer("int", ">i"),
        _fixed_integer("bigint", ">q"),
        _float_codec("float", ">f", _comparable.float32),
        _float_codec("double", ">d", _comparable.float64),
        native_codec("varint", _varint_encode, _varint_value, _varint_check, _varint_value,
                     _varint_comparable),
        native_codec("decimal", _decimal_encode, _decimal_decode, _decimal_check,
                     _decimal_decode, _decimal_comparable),
        native_codec("ascii", _ascii_encode, _ascii_decode, _ascii_check, _raw_key, escaped),
        native_codec("text", _text_encode, _text_decode, _text_check, _raw_key, escaped),
        native_codec("blob", _blob_encode, _blob_decode, _no_check, _raw_key, escaped),
        native_codec("inet", _inet_encode, _inet_decode, _inet_check, _raw_key,
                     _inet_comparable),
        native_codec("boolean", _boolean_encode, _boolean_decode, _check_one_byte,
                     _boolean_decode, _boolean_comparable),
        native_codec("timestamp", _timestamp_encode, _timestamp_decode, _check_eight,
                     _int64_decode, signed64),
        native_codec("date", _date_encode, _date_decode, _check_four, _date_key,
                     _date_comparable),
        native_codec("time", _time_encode, _time_decode, _time_check, _int64_decode, signed64),
        native_codec("uuid", _uuid_encode, _uuid_decode, _check_sixteen, _uuid_key,
                     _uuid_comparable),
        native_codec("timeuuid", _timeuuid_encode, _timeuuid_decode, _timeuuid_check,
                     _timeuuid_key, _timeuuid_comparable),
        native_codec("duration", _duration_encode, _duration_decode, _duration_check,
                     unorderable("duration"), unorderable("duration"), orderable=False),
    ]  # fmt: skip
    return {codec.type_name: codec for codec in codecs}


NATIVE_CODECS: dict[str, Codec] = _build_natives()
"""One compiled codec per native type name."""

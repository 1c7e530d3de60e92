import pytest

from hostkit.sizes import GIB, KIB, MIB, TIB, SizeError, format_size, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("16G", 16 * GIB),
        ("16GiB", 16 * GIB),
        ("16g", 16 * GIB),
        ("512M", 512 * MIB),
        ("1024K", MIB),
        ("1T", TIB),
        ("1.5G", 3 * GIB // 2),
        (" 8 G ", 8 * GIB),
        ("0", 0),
    ],
)
def test_parse_size_accepts_binary_units(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        ("16", "'16G'"),  # a bare number could mean anything
        ("16GB", "'16G' or '16GiB'"),  # decimal spelling refused
        ("-1G", "not a size"),
        ("16X", "not a size"),
        ("", "not a size"),
        ("G", "not a size"),
    ],
)
def test_parse_size_refuses_with_a_hint(text, hint):
    with pytest.raises(SizeError) as caught:
        parse_size(text)
    assert hint in str(caught.value)


def test_parse_size_refuses_non_strings():
    with pytest.raises(SizeError):
        parse_size(16)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("size", "text"),
    [(16 * GIB, "16G"), (3 * GIB // 2, "1.5G"), (512 * MIB, "512M"), (KIB, "1K"), (TIB, "1T"), (1000, "1000B")],
)
def test_format_size(size, text):
    assert format_size(size) == text


@pytest.mark.parametrize("text", ["16G", "512M", "1T", "3K"])
def test_exact_sizes_round_trip(text):
    assert format_size(parse_size(text)) == text

"""The augmentations (xbench.schemas.augment) against independent brute force: per-pixel loops written from
the contract's definitions (docs/contract.md, "Augmentations"), exact round trips of the inverse on maps,
and the spec parser's refusals."""
from __future__ import annotations

import io
import math

import numpy as np
import pytest

from xbench.schemas.augment import (AUGMENTATIONS, MAX_SPEC_CHARS, MAX_SPECS, AugmentSpec, parse_spec,
                                    parse_specs)
from xbench.schemas.errors import InputError, UnknownNameError

RNG = np.random.default_rng(7)
IMG = RNG.integers(0, 256, size=(23, 17), dtype=np.uint8)


# ------------------------------------------------------------------------------------------ brute force
def _bilinear(a: np.ndarray, u: float, v: float) -> float | None:
    """``a`` at normalised (u, v) by the contract's rule, one point at a time; None out of view."""
    h, w = a.shape
    if not (-1e-9 <= u <= 1 + 1e-9 and -1e-9 <= v <= 1 + 1e-9):
        return None
    x = min(max(u * w - 0.5, 0.0), w - 1.0)
    y = min(max(v * h - 0.5, 0.0), h - 1.0)
    x = round(x) if abs(x - round(x)) < 1e-6 else x
    y = round(y) if abs(y - round(y)) < 1e-6 else y
    x0, y0 = math.floor(x), math.floor(y)
    x1, y1 = min(x0 + 1, w - 1), min(y0 + 1, h - 1)
    fx, fy = x - x0, y - y0
    return ((a[y0, x0] * (1 - fx) + a[y0, x1] * fx) * (1 - fy)
            + (a[y1, x0] * (1 - fx) + a[y1, x1] * fx) * fy)


def _where_from(name: str, params: dict):
    """For each geometric augmentation, closed forms of the point of the original an augmented point shows
    (backward) and where an original point shows (forward), written independently of the package."""
    if name == "hflip":
        f = b = lambda u, v: (1 - u, v)
    elif name == "rotate":
        t = math.radians(params["degrees"])
        c, s = math.cos(t), math.sin(t)
        # counter-clockwise as displayed with v down: the point right of the centre goes up
        f = lambda u, v: (0.5 + c * (u - .5) + s * (v - .5), 0.5 - s * (u - .5) + c * (v - .5))
        b = lambda u, v: (0.5 + c * (u - .5) - s * (v - .5), 0.5 + s * (u - .5) + c * (v - .5))
    elif name == "scale":
        k = params["factor"]
        f = lambda u, v: (0.5 + k * (u - .5), 0.5 + k * (v - .5))
        b = lambda u, v: (0.5 + (u - .5) / k, 0.5 + (v - .5) / k)
    elif name == "translate":
        dx, dy = params["x"] / params["side"], params["y"] / params["side"]
        f = lambda u, v: (u + dx, v + dy)
        b = lambda u, v: (u - dx, v - dy)
    return f, b


def _brute_warp(a: np.ndarray, where, fill: float) -> np.ndarray:
    h, w = a.shape
    out = np.empty((h, w))
    for i in range(h):
        for j in range(w):
            val = _bilinear(a.astype(np.float64), *where((j + .5) / w, (i + .5) / h))
            out[i, j] = fill if val is None else val
    return out


GEOMETRIC = ["hflip", "rotate:degrees=10", "rotate:degrees=-33.5", "rotate:degrees=90", "scale:factor=1.3",
             "scale:factor=0.6", "translate:x=40,y=-25,side=512", "translate:x=3.3,y=1,side=17"]


@pytest.mark.parametrize("text", GEOMETRIC)
def test_geometric_image_equals_brute_force(text):
    spec = parse_spec(text)
    _, back = _where_from(spec.name, spec.params)
    expected = _brute_warp(IMG, back, 0.0)
    got = spec.apply_image(IMG, seed=0).astype(np.float64)
    diff = np.abs(got - np.clip(np.rint(expected), 0, 255))
    assert diff.max() <= 1 and (diff == 0).mean() > 0.98  # a value at .5 may round either way in float


@pytest.mark.parametrize("text", GEOMETRIC)
def test_invert_map_equals_brute_force(text):
    spec = parse_spec(text)
    fwd, _ = _where_from(spec.name, spec.params)
    maps = RNG.normal(size=(2, 9, 13))
    got = spec.invert_map(maps)
    for k in range(2):
        expected = _brute_warp(maps[k], fwd, maps[k].min())
        np.testing.assert_allclose(got[k], expected, rtol=1e-6, atol=1e-6)
    cover = spec.coverage((9, 13))
    brute_cover = np.array([[_bilinear(maps[0], *fwd((j + .5) / 13, (i + .5) / 9)) is not None
                             for j in range(13)] for i in range(9)])
    assert (cover == brute_cover).all()
    assert got.dtype == np.float32 and spec.invert_map(maps[0]).shape == (9, 13)


def test_explicit_fill_and_shapes():
    spec = parse_spec("translate:x=256,side=512")
    maps = np.arange(2 * 3 * 4 * 4, dtype=np.float64).reshape(2, 3, 4, 4)
    out = spec.invert_map(maps, fill=-5.0)
    assert out.shape == maps.shape
    assert (out[..., :, 2:] == -5).all() and (out[..., :, :2] == maps[..., :, 2:]).all()


# ----------------------------------------------------------------------------------------- round trips
def test_hflip_is_exact_both_ways():
    spec = parse_spec("hflip")
    assert (spec.apply_image(IMG, seed=0) == IMG[:, ::-1]).all()
    m = RNG.normal(size=(3, 7, 10))
    assert (spec.invert_map(m) == m[..., ::-1].astype(np.float32)).all()
    assert (spec.invert_map(spec.apply_image(IMG, seed=0)) == IMG).all()
    assert spec.coverage((7, 10)).all()


@pytest.mark.parametrize("degrees,k", [(90, 1), (180, 2), (270, 3), (-90, 3), (360, 0), (-270, 1)])
def test_quarter_turns_are_exact(degrees, k):
    square = RNG.integers(0, 256, size=(12, 12), dtype=np.uint8)
    spec = parse_spec(f"rotate:degrees={degrees}")
    turned = spec.apply_image(square, seed=0)
    assert (turned == np.rot90(square, k)).all()  # numpy's rot90 turns counter-clockwise as displayed
    assert (spec.invert_map(turned) == square).all()
    assert spec.coverage((12, 12)).all()


@pytest.mark.parametrize("cells", [(2, 0), (-3, 1), (0, -4)])
def test_translate_by_whole_cells_round_trips_where_in_view(cells):
    grid = RNG.integers(0, 256, size=(16, 16), dtype=np.uint8)
    cx, cy = cells
    spec = parse_spec(f"translate:x={cx * 32},y={cy * 32}")  # 32 pixels of a 512 side = one cell of 16
    moved = spec.apply_image(grid, seed=0)
    expected = np.zeros_like(grid)
    src = grid[max(0, -cy):16 - max(0, cy), max(0, -cx):16 - max(0, cx)]
    expected[max(0, cy):max(0, cy) + src.shape[0], max(0, cx):max(0, cx) + src.shape[1]] = src
    assert (moved == expected).all()
    back = spec.invert_map(moved)
    cover = spec.coverage((16, 16))
    assert cover.sum() == (16 - abs(cx)) * (16 - abs(cy))
    assert (back[cover] == grid[cover]).all()
    assert (back[~cover] == moved.min()).all()


def test_same_normalised_geometry_at_two_resolutions():
    """A shift of x pixels of a side-512 image moves a 1024-wide original by 2x pixels: the same place."""
    big = np.zeros((1024, 1024), np.uint8)
    big[500:524, 300:324] = 255
    small = big.reshape(512, 2, 512, 2).max(axis=(1, 3))
    spec = parse_spec("translate:x=20,y=-10")
    b, s = spec.apply_image(big, seed=0), spec.apply_image(small, seed=0)
    assert np.argwhere(b == 255).min(axis=0).tolist() == [480, 340]
    assert np.argwhere(s == 255).min(axis=0).tolist() == [240, 170]


# ------------------------------------------------------------------------------------------ photometric
def test_brightness_contrast_gamma_per_pixel():
    for text, f in [("brightness:delta=-40.5", lambda p, img: p - 40.5),
                    ("brightness", lambda p, img: p + 16),
                    ("contrast:factor=1.7", lambda p, img: img.mean() + 1.7 * (p - img.mean())),
                    ("contrast:factor=0", lambda p, img: img.mean()),
                    ("gamma:gamma=0.5", lambda p, img: 255 * (p / 255) ** 0.5),
                    ("gamma:gamma=2.2", lambda p, img: 255 * math.pow(p / 255, 2.2))]:
        got = parse_spec(text).apply_image(IMG, seed=0)
        for (i, j), p in np.ndenumerate(IMG):
            want = min(255, max(0, round(f(float(p), IMG.astype(np.float64)))))  # round(): half to even too
            assert got[i, j] == want, (text, i, j)


def test_noise_is_the_seeded_draw_and_depends_only_on_the_seed():
    spec = parse_spec("noise:sigma=12")
    grey = np.full((300, 200), 128, np.uint8)
    a, b, c = (spec.apply_image(grey, seed=s) for s in (5, 5, 6))
    assert (a == b).all() and (a != c).any()
    z = np.random.default_rng(5).standard_normal((300, 200))
    want = np.clip(np.rint(128 + 12 * z), 0, 255)
    assert (a == want).all()
    d = a.astype(np.float64) - 128
    assert abs(d.mean()) < 0.2 and abs(d.std() - 12) < 0.3
    assert (parse_spec("noise:sigma=0").apply_image(IMG, seed=1) == IMG).all()


def test_noise_drawn_in_bands_is_the_one_draw(monkeypatch):
    from xbench.schemas.augment import noise

    spec = parse_spec("noise:sigma=40")
    whole = spec.apply_image(IMG, seed=11)
    monkeypatch.setattr(noise, "_BAND_PIXELS", 3 * IMG.shape[1])  # 3 rows at a time, the last band shorter
    assert (spec.apply_image(IMG, seed=11) == whole).all()


def _reflect(i: int, n: int) -> int:
    i %= 2 * n
    return i if i < n else 2 * n - 1 - i


def _brute_blur(img: np.ndarray, sy: float, sx: float) -> np.ndarray:
    """A 2-D Gaussian sum per pixel (the separable kernel's outer product), mirrored borders."""
    h, w = img.shape
    def weights(s):
        r = math.ceil(4 * s) if s > 0 else 0
        if r == 0:
            return {0: 1.0}
        ws = {k: math.exp(-k * k / (2 * s * s)) for k in range(-r, r + 1)}
        total = sum(ws.values())
        return {k: v / total for k, v in ws.items()}
    wy, wx = weights(sy), weights(sx)
    out = np.empty((h, w))
    for i in range(h):
        for j in range(w):
            out[i, j] = sum(wy[a] * wx[b] * float(img[_reflect(i + a, h), _reflect(j + b, w)])
                            for a in wy for b in wx)
    return np.clip(np.rint(out), 0, 255)


@pytest.mark.parametrize("text,sy,sx", [("blur:sigma=1,side=23", 1.0, 17 / 23), ("blur:sigma=2.5,side=10", 5.75, 4.25),
                                        ("blur:sigma=9.2,side=23", 9.2, 9.2 * 17 / 23),  # long kernels: the FFT path
                                        ("blur:sigma=0", 0, 0),
                                        ("blur:sigma=1e-300", 0, 0)])  # s^2 underflows: the limit, no NaN
def test_blur_equals_a_2d_sum_with_mirrored_borders(text, sy, sx):
    got = parse_spec(text).apply_image(IMG, seed=0).astype(np.float64)
    diff = np.abs(got - _brute_blur(IMG, sy, sx))
    assert diff.max() <= 1 and (diff == 0).mean() > 0.98


def test_blur_in_bands_is_the_blur_at_once(monkeypatch):
    from xbench.schemas.augment import blur

    for text in ("blur:sigma=1,side=23", "blur:sigma=9.2,side=23"):
        whole = parse_spec(text).apply_image(IMG, seed=0)
        monkeypatch.setattr(blur, "_BAND_PIXELS", 40)  # 2 rows or columns at a time
        assert (parse_spec(text).apply_image(IMG, seed=0) == whole).all()
        monkeypatch.undo()


def _brute_blur_separable(img: np.ndarray, sy: float, sx: float) -> np.ndarray:
    """The contract's blur one axis after the other, every tap of the full kernel (r = ceil(4 s)) summed
    over the mirrored image, however long the kernel is (no folding)."""
    def axis(a: np.ndarray, s: float) -> np.ndarray:
        n = a.shape[0]
        r = math.ceil(4 * s)
        ks = np.arange(-r, r + 1)
        w = np.exp(-(ks * ks) / (2 * s * s))
        w /= w.sum()
        src = np.array([[_reflect(i + k, n) for k in ks] for i in range(n)])  # n x (2r+1) indexes
        return np.einsum("ik,ik...->i...", np.broadcast_to(w, src.shape), a[src])
    out = axis(axis(img.astype(np.float64), sy).T, sx).T
    return np.clip(np.rint(out), 0, 255)


#: sha256 (first 16 hex) of blur outputs written by the code before long kernels were folded (r <= 2n there:
#: those outputs must not move by a single byte); images from default_rng(11) in this order
_BLUR_BEFORE = {
    ((23, 17), "blur:sigma=1,side=512"): "b037526d05636f4b", ((23, 17), "blur:sigma=9.2,side=23"): "65d63207745a7ee4",
    ((23, 17), "blur:sigma=11.5,side=23"): "52515a414d4fea8b",  # r = 46 = 2n down, 34 = 2n across: the edge
    ((64, 48), "blur:sigma=32,side=512"): "30a32c03455f6e51", ((64, 48), "blur:sigma=32,side=64"): "4035247c7aa98ad1",
    ((200, 160), "blur:sigma=1,side=512"): "a45a9e6c1ec6b9c4", ((200, 160), "blur:sigma=2.5,side=10"): "6a3f39b9e100c80b",
    ((200, 160), "blur:sigma=0.3,side=7"): "759c4d18b769ec68", ((200, 160), "blur:sigma=32,side=200"): "45f5a3b5bcd00b53",
}


def test_blur_outputs_for_kernels_within_twice_the_image_are_byte_identical_to_before():
    import hashlib

    rng = np.random.default_rng(11)
    imgs = {shape: rng.integers(0, 256, size=shape, dtype=np.uint8) for shape in ((23, 17), (64, 48), (200, 160))}
    for (shape, text), digest in _BLUR_BEFORE.items():
        out = parse_spec(text).apply_image(imgs[shape], seed=0)
        assert hashlib.sha256(out.tobytes()).hexdigest()[:16] == digest, (shape, text)


@pytest.mark.parametrize("text,shape", [("blur:sigma=12,side=23", (23, 17)),  # r = 48 > 46 down, 36 > 34 across
                                        ("blur:sigma=3,side=2", (19, 13)),    # r several periods long
                                        ("blur:sigma=32,side=1", (9, 7))])    # the hostile spec: r = 1152 and 896
def test_blur_with_a_kernel_longer_than_twice_the_image_equals_the_full_sum(text, shape):
    y, x = np.mgrid[:shape[0], :shape[1]]
    img = np.clip(30 + 9 * y + 5 * x + RNG.integers(0, 40, size=shape), 0, 255).astype(np.uint8)  # not flat
    spec = parse_spec(text)
    sy, sx = (spec.params["sigma"] * n / spec.params["side"] for n in shape)
    want = _brute_blur_separable(img, sy, sx)
    got = spec.apply_image(img, seed=0).astype(np.float64)
    assert np.abs(got - want).max() <= 1 and (got == want).mean() > 0.95
    if text == "blur:sigma=12,side=23":
        assert np.abs(got - _brute_blur(img, sy, sx)).max() <= 1 and np.ptp(want) > 20  # the 2-D sum too


def test_the_largest_documented_blur_runs_in_bounded_time_and_memory():
    import time
    import tracemalloc

    img = RNG.integers(0, 256, size=(512, 512), dtype=np.uint8)
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        out = parse_spec("blur:sigma=32,side=1").apply_image(img, seed=0)  # s = 16384 px, r = 65536 taps
        elapsed, peak = time.perf_counter() - t0, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert elapsed < 10 and peak < 100e6, (elapsed, peak)  # it took about a minute and 3.1 GB unfolded
    assert (out == round(float(img.mean()))).all() or np.ptp(out) <= 1  # the blur of the whole picture: its mean


def test_jpeg_is_pillows_round_trip_at_the_quality():
    from PIL import Image

    smooth = np.clip(np.add.outer(np.arange(40) * 3, np.arange(48) * 2), 0, 255).astype(np.uint8)
    for q in (10, 75, 100):
        buf = io.BytesIO()
        Image.fromarray(smooth).save(buf, format="JPEG", quality=q)
        want = np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("L"))
        got = parse_spec(f"jpeg:quality={q}").apply_image(smooth, seed=0)
        assert (got == want).all() and got.shape == smooth.shape
    err = [np.abs(parse_spec(f"jpeg:quality={q}").apply_image(IMG, seed=0).astype(int) - IMG).mean() for q in (5, 95)]
    assert err[0] > err[1] > 0


def test_photometric_maps_are_unchanged_copies():
    m = RNG.normal(size=(2, 5, 6))
    for name in ("brightness", "contrast", "gamma", "noise", "blur", "jpeg"):
        spec = parse_spec(name)
        out = spec.invert_map(m)
        assert not spec.geometric and out.dtype == np.float32 and (out == m.astype(np.float32)).all()
        assert out is not m and spec.coverage((5, 6)).all()


def test_every_augmentation_keeps_shape_and_dtype():
    assert AUGMENTATIONS.names() == ["blur", "brightness", "contrast", "gamma", "hflip", "jpeg", "noise", "rotate",
                                     "scale", "translate"]
    for name in AUGMENTATIONS.names():
        for img in (IMG, np.zeros((1, 1), np.uint8), np.full((2, 9), 255, np.uint8)):
            out = parse_spec(name).apply_image(img, seed=3)
            assert out.dtype == np.uint8 and out.shape == img.shape
    for name in AUGMENTATIONS.names():  # the module's name is the augmentation's own: canonical text parses back
        assert AUGMENTATIONS.get(name).name == name
    with pytest.raises(InputError, match="uint8"):
        parse_spec("hflip").apply_image(IMG.astype(np.float32), seed=0)


# ---------------------------------------------------------------------------------------------- parsing
def test_bare_names_defaults_and_canonical_text():
    assert [str(parse_spec(n)) for n in AUGMENTATIONS.names()] == [
        "blur:sigma=1,side=512", "brightness:delta=16", "contrast:factor=1.2", "gamma:gamma=0.8", "hflip",
        "jpeg:quality=75", "noise:sigma=8", "rotate:degrees=10", "scale:factor=1.1", "translate:x=16,y=0,side=512"]
    spec = parse_spec("  translate: y = -2.50 , x=1e1 ")
    assert spec.params == {"x": 10.0, "y": -2.5, "side": 512} and str(spec) == "translate:x=10,y=-2.5,side=512"
    assert parse_spec(str(spec)) == spec
    assert isinstance(spec, AugmentSpec) and spec.geometric
    assert parse_spec("jpeg:quality=+30").params == {"quality": 30}


def test_parse_specs_splits_on_commas_before_a_new_name():
    specs = parse_specs(["hflip,rotate:degrees=5,translate:x=3,y=4", "noise", "noise"])
    assert [str(s) for s in specs] == ["hflip", "rotate:degrees=5", "translate:x=3,y=4,side=512", "noise:sigma=8",
                                       "noise:sigma=8"]
    assert parse_specs(None) == [] and parse_specs([]) == []


@pytest.mark.parametrize("text,needle", [
    ("rotate:degree=5", "unknown key 'degree' (did you mean degrees?)"),
    ("hflip:x=1", "hflip takes no parameters"),
    ("rotate:", "nothing after ':'"),
    ("rotate:degrees", "is not key=value"),
    ("rotate:=4", "is not key=value"),
    ("rotate:degrees=5,degrees=6", "degrees is given twice"),
    ("rotate:degrees=nan", "must be a number"),
    ("rotate:degrees=inf", "must be a number"),
    ("rotate:degrees=1e400", "must be a number in [-360, 360]"),
    ("rotate:degrees=361", "must be a number in [-360, 360], got 361.0"),
    ("rotate:degrees=0x10", "must be a number"),
    ("rotate:degrees=1_0", "must be a number"),
    ("rotate:degrees=" + "9" * 5000, "must be a number"),  # over the length limit: refused unparsed
    ("jpeg:quality=7.5", "must be an integer in [1, 100]"),
    ("jpeg:quality=0", "must be an integer in [1, 100]"),
    ("jpeg:quality=99999999999999", "must be an integer"),
    ("gamma:gamma=0", "in (0, 20]"),
    ("translate:x=512", "moves the image out of view"),
    ("scale:factor=-1", "in [0.25, 4]"),
    (":degrees=3", "no name"),
])
def test_bad_params_are_one_line_each(text, needle):
    with pytest.raises(InputError) as e:
        parse_spec(text)
    lines = [str(p) for p in e.value.problems]
    assert any(needle in line for line in lines) or ("characters long" in str(e.value) and len(text) > MAX_SPEC_CHARS), lines
    assert all("\n" not in line and len(line) < 400 for line in lines)


def test_every_problem_of_a_spec_is_reported_together():
    with pytest.raises(InputError) as e:
        parse_spec("translate:x=nan,z=1,side=0")
    assert len(e.value.problems) == 3


def test_unknown_name_says_did_you_mean():
    with pytest.raises(UnknownNameError, match="Did you mean: rotate"):
        parse_spec("rotat:degrees=3")
    with pytest.raises(InputError):
        parse_spec(3)  # type: ignore[arg-type]


def test_hostile_lists():
    with pytest.raises(InputError, match="characters long"):
        parse_spec("x" * (MAX_SPEC_CHARS + 1))
    with pytest.raises(InputError, match=f"at most {MAX_SPECS}"):
        parse_specs(",".join(f"rotate:degrees={i}" for i in range(MAX_SPECS + 1)))
    with pytest.raises(InputError, match="characters long"):
        parse_specs("a" * 10**6)
    with pytest.raises(InputError, match="empty augmentation spec"):
        parse_specs("hflip,,rotate")
    with pytest.raises(InputError, match="listed twice"):
        parse_specs("hflip,hflip")
    with pytest.raises(InputError) as e:
        parse_specs("rotat,jpeg:quality=0")
    assert len(e.value.problems) == 2  # both pieces named, the unknown name with its close match

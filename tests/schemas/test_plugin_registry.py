"""The one plug-in registry (xbench.schemas.registry): lazy entries, kind checks, did-you-mean, discovery
by listing a package, entry points."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from xbench.schemas.errors import InputError, UnknownNameError
from xbench.schemas.registry import ENTRY_POINT_GROUPS, PluginError, Registry, declared_entries, import_target


class Base:
    pass


class Child(Base):
    pass


def test_lazy_entry_is_imported_on_first_use_and_checked(tmp_path, monkeypatch):
    (tmp_path / "lazy_mod_reg.py").write_text("IMPORTED = True\nclass Thing:\n    pass\nNOT_A_CLASS = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    r = Registry("thing", check=type, as_class=False)
    r.register("thing", "lazy_mod_reg:Thing")
    r.register("bad", "lazy_mod_reg:NOT_A_CLASS")
    assert "lazy_mod_reg" not in sys.modules  # registering and listing import nothing
    assert r.names() == ["bad", "thing"]
    assert "lazy_mod_reg" not in sys.modules
    assert r.get("thing").__name__ == "Thing"
    with pytest.raises(PluginError, match="'bad' is int 3; it must be an instance of builtins.type"):
        r.get("bad")


def test_base_class_check_on_registration_and_on_first_use():
    r = Registry("widget", check=Base, as_class=True)
    r.register("child", Child)
    assert r.get("child") is Child
    with pytest.raises(PluginError, match="must be a subclass of .*Base"):
        r.register("int", int)
    assert "int" not in r
    r.register("lazy", "builtins:int")  # a target string is checked when first asked for
    with pytest.raises(PluginError, match="must be a subclass"):
        r.get("lazy")
    instances = Registry("widget instance", check=Base)
    instances.register("one", Child())
    with pytest.raises(PluginError, match="an instance of"):
        instances.register("cls", Child)


def test_predicate_check_names_what_it_wants():
    def positive(x):
        """a positive number"""
        return x > 0

    r = Registry("count", check=positive)
    with pytest.raises(PluginError, match="it must be a positive number"):
        r.register("neg", -1)


def test_unknown_name_suggests_close_ones_and_is_an_input_error():
    r = Registry("dataset", hint="(xbench-prepare --list)")
    for name in ("rsna_pneumonia", "siim_acr", "phantom"):
        r.register(name, name)
    with pytest.raises(UnknownNameError) as info:
        r.get("phantm")
    assert isinstance(info.value, InputError) and isinstance(info.value, KeyError)
    assert str(info.value) == ("unknown dataset 'phantm'. Did you mean: phantom? "
                               "Available: phantom, rsna_pneumonia, siim_acr")
    assert r.unknown_message("xyz").endswith("Available: phantom, rsna_pneumonia, siim_acr (xbench-prepare --list)")
    with pytest.raises(UnknownNameError):
        r.get(["not", "hashable"])  # a name from a parsed file may be anything


def test_aliases_duplicates_and_unregister():
    r = Registry("colour")
    r.register("red", 1, aliases=("rouge",))
    r.register("red", 1)  # the same entry again is harmless
    with pytest.raises(ValueError, match="already registered"):
        r.register("rouge", 2)
    assert r.get("rouge") == 1
    r.unregister("rouge")
    assert "rouge" not in r and list(r) == ["red"] and len(r) == 1


def test_decorator_registers():
    r = Registry("function", check=callable)

    @r.decorator("double", aliases=("twice",))
    def double(x):
        return 2 * x

    assert r.get("twice")(3) == 6


def test_import_target_errors_name_the_target():
    assert import_target("os.path:join") is __import__("os").path.join
    with pytest.raises(PluginError, match="expected 'package.module:attribute'"):
        import_target("no-colon")
    with pytest.raises(PluginError, match="'xbench_no_such_module:x' cannot be imported"):
        import_target("xbench_no_such_module:x")
    with pytest.raises(PluginError, match="cannot be imported"):
        import_target("os:no_such_attribute")


def test_a_missing_dependency_stays_an_import_error(tmp_path, monkeypatch):
    """A module that exists but needs an absent package: the CLI says which extra to install."""
    (tmp_path / "needs_absent_dep_reg.py").write_text("import xbench_absent_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ImportError) as info:
        import_target("needs_absent_dep_reg:x")
    assert not isinstance(info.value, PluginError)


def _package(tmp_path, name: str, files: dict[str, str]):
    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for file, text in files.items():
        (pkg / file).write_text(textwrap.dedent(text))
    return pkg


def test_discover_lists_a_package_without_importing_it(tmp_path, monkeypatch):
    pkg = _package(tmp_path, "disc_pkg_reg", {
        "alpha.py": "raise RuntimeError('imported')\nMETHOD = 1\n",
        "beta.py": "METHOD = 2\n",
        "_private.py": "METHOD = 3\n",
    })
    monkeypatch.syspath_prepend(str(tmp_path))
    r = Registry("method")
    assert r.discover("disc_pkg_reg", [str(pkg)], attr="METHOD") == ["alpha", "beta"]
    assert r.target("beta") == "disc_pkg_reg.beta:METHOD"
    assert "disc_pkg_reg.alpha" not in sys.modules
    assert r.get("beta") == 2


def test_discover_reads_declarations_from_the_source(tmp_path, monkeypatch):
    pkg = _package(tmp_path, "decl_pkg_reg", {
        "one.py": """
            import xbench_absent_dependency  # listing must not import it
            REGISTER = {"first": "build", "first-alias": "build"}
            def build(config): ...
            """,
        "helpers.py": "X = 1\n",
    })
    monkeypatch.syspath_prepend(str(tmp_path))
    r = Registry("model")
    assert r.discover("decl_pkg_reg", [str(pkg)], declared="REGISTER") == ["first", "first-alias"]
    assert r.target("first") == "decl_pkg_reg.one:build"


def test_a_declaration_must_be_a_literal_dict(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("NAME = 'x'\nREGISTER = {NAME: 'build'}\n")
    with pytest.raises(PluginError, match="REGISTER must be a literal dict"):
        declared_entries(bad, "REGISTER")
    bad.write_text("REGISTER: dict = {'x': 1}\n")
    with pytest.raises(PluginError):
        declared_entries(bad, "REGISTER")
    bad.write_text("def f(:\n")  # not Python: no declaration (importing it would fail on its own)
    assert declared_entries(bad, "REGISTER") == {}


def _dist_info(tmp_path, group: str, lines: list[str]):
    """A throw-away installed distribution: a dist-info folder with entry_points.txt on sys.path."""
    info = tmp_path / "xbench_throwaway_plugin-0.0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: xbench-throwaway-plugin\nVersion: 0.0.1\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n" + "\n".join(lines) + "\n")
    return info


def test_entry_points_are_read_lazily_and_built_ins_win(tmp_path, monkeypatch):
    (tmp_path / "ep_mod_reg.py").write_text("VALUE = 7\n")
    _dist_info(tmp_path, "xbench.testkind", ["plugged = ep_mod_reg:VALUE", "builtin = ep_mod_reg:VALUE"])
    monkeypatch.syspath_prepend(str(tmp_path))
    r = Registry("test kind", check=int, entry_point_group="xbench.testkind")
    r.register("builtin", 1)  # (a string entry is always a module:attr target)
    assert "ep_mod_reg" not in sys.modules
    assert r.names() == ["builtin", "plugged"]
    assert r.get("plugged") == 7
    assert r.get("builtin") == 1


def test_groups_are_documented():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "explanation" / "architecture.md").read_text()
    for group in ENTRY_POINT_GROUPS.values():
        assert f"`{group}`" in text


def test_importing_it_is_light():
    code = ("import sys, xbench.schemas.registry\n"
            "print(sorted(m for m in ('numpy', 'zarr', 'torch') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_old_shim_is_gone():
    """One home for the registry (issue 36: shims removed before any release)."""
    import importlib.util

    assert importlib.util.find_spec("xbench.extract.registry") is None


def test_the_docstring_example_runs():
    import doctest

    import xbench.schemas.registry as module

    result = doctest.testmod(module)
    assert result.attempted >= 3 and result.failed == 0

"""dpshim's start-up hook. dpshim-run puts this directory, which holds only
this file, on PYTHONPATH (with the dpshim package's) when its command runs
python; Python imports it at start-up.

It does nothing at all (imports neither torch nor dpshim) unless
libdpshim.so is in LD_PRELOAD, DPSHIM_VLM_BALANCE is on (1, true, yes, on,
as the shim reads it) and DPSHIM_PY_WRAP is not off (0, false, no, off).
Then dpshim.autowrap.install() has every torch DataLoader's packed batches
balanced, once the trainer imports torch; see that module for what the
trainer must keep to (every DP rank iterates each wrapped loader in step).

Either way it then runs the sitecustomize it shadows, the next one on
sys.path (Debian ships one), so that nothing is lost. `python -I` or `-S`
skip this file, and the hook with it.
"""
import os
import sys

ON = ("1", "true", "yes", "on")
OFF = ("0", "false", "no", "off")


def _preloaded():
    """libdpshim.so itself (not an adapter beside it) in LD_PRELOAD."""
    entries = os.environ.get("LD_PRELOAD", "").replace(":", " ").split()
    return any(os.path.basename(e).startswith("libdpshim.so")
               for e in entries)


def _say(line):
    """One line on stderr, from rank 0 only (every rank reads the same
    environment)."""
    for name in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"):
        if os.environ.get(name, "0") != "0":
            return
    sys.stderr.write("dpshim: %s\n" % line)


def _wanted():
    balance = os.environ.get("DPSHIM_VLM_BALANCE", "").strip().lower()
    wrap = os.environ.get("DPSHIM_PY_WRAP", "").strip().lower()
    if not (_preloaded() and balance in ON) or wrap in OFF:
        return False
    if wrap and wrap not in ON:
        _say("DPSHIM_PY_WRAP='%s': expected one of %s or %s; the DataLoader "
             "hook is off" % (wrap, "/".join(ON), "/".join(OFF)))
        return False
    return True


def _install():
    try:
        import dpshim.autowrap
        dpshim.autowrap.install()
    except Exception as e:  # the trainer runs on, as without the hook
        _say("the DataLoader hook is off: %s: %s (is the dpshim package on "
             "PYTHONPATH?)" % (type(e).__name__, e))


def _chain():
    """Runs the sitecustomize this one shadows: the first one after this
    directory on sys.path."""
    import importlib.machinery
    import importlib.util
    here = os.path.dirname(os.path.realpath(__file__))
    dirs = [os.path.realpath(p or ".") for p in sys.path]
    later = sys.path[dirs.index(here) + 1:] if here in dirs else sys.path
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", later)
    if spec is None or spec.loader is None or os.path.realpath(
            spec.origin or "") == os.path.realpath(__file__):
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if _wanted():
    _install()
chained = _chain()

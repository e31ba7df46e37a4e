"""Where a build keeps what it makes besides its site: a folder of its own per output folder.

Beside the output folder ``<out>``, in ``<out>.work/`` (``docs/_build/html.work/`` for the
book's own build):

- ``jupyter_execute/``: MyST-NB's executed notebooks and glue data, which the downloads,
  the notebook twins and the edition recorder read;
- ``kernels/``: the kernels' IPython profile and the cell each is running;
- ``editions/``: each stored edition's sources and build, and the plan the build tool runs;
- ``doctrees/``: Sphinx's environment and doctrees (``sphinx-build -d``), which are
  not part of the site a host publishes;
- ``jupyter_cache/``: the execution caches, unless ``AMP_LESSON_CACHE_DIR`` names a folder
  to share (:mod:`.cache`).

The kernels' sockets alone cannot be there (a Unix socket's path is limited to about 100
bytes): they are in a folder of the build's own in ``/tmp``, named for the output folder
(a digest of its path) and unique to the build's process
(:meth:`.kernels.KernelServer.open`), removed as the build ends, or by the next build if it
was killed.

Two builds into two output folders share none of it, whatever folder holds both: before,
it all sat in the output folder's parent, and two books built at once into sibling
folders handed each other's notebooks out.

>>> work_folder("docs/_build/html").as_posix()
'docs/_build/html.work'
>>> executed_folder("/tmp/outX").as_posix()
'/tmp/outX.work/jupyter_execute'
"""

from __future__ import annotations

from pathlib import Path

SUFFIX = ".work"


def work_folder(outdir: str | Path) -> Path:
    """The folder of the build into ``outdir`` for what is not its site."""
    out = Path(outdir)
    return out.with_name(out.name + SUFFIX)


def executed_folder(outdir: str | Path) -> Path:
    """Where MyST-NB writes the build's executed notebooks (``<page>.ipynb``, ``.glue.json``)."""
    return work_folder(outdir) / "jupyter_execute"


def kernels_folder(outdir: str | Path) -> Path:
    """The kernels' IPython profile and their cell records."""
    return work_folder(outdir) / "kernels"


def editions_folder(outdir: str | Path) -> Path:
    """The stored editions' sources and builds, and the plan of them (``plan.json``)."""
    return work_folder(outdir) / "editions"


def doctrees_folder(outdir: str | Path) -> Path:
    """Sphinx's pickled environment and doctrees (``sphinx-build -d``): not in the site.

    >>> doctrees_folder("docs/_build/html").as_posix()
    'docs/_build/html.work/doctrees'
    """
    return work_folder(outdir) / "doctrees"


def cache_folder(outdir: str | Path) -> Path:
    """The default home of the build's execution caches."""
    return work_folder(outdir) / "jupyter_cache"

"""The places where the build leans on the shape of another project's code (:mod:`amp_book.patches`).

Each test fails, by its name, when the upstream release in the lock changes
that shape, so no workaround can switch off without a word. CONTRIBUTING.md
("Where the build leans on private APIs") lists each with the bug it works around.
"""

from __future__ import annotations

import builtins
import dataclasses
import inspect
import logging
import types

from docutils import nodes as docutils_nodes
from jupyter_cache.cache.main import JupyterCacheBase
from jupyter_client.manager import KernelManager
from myst_nb.sphinx_ import Parser as MystNbParser
from sphinx.builders import Builder

from amp_book import execution


def test_sphinx_still_writes_in_parallel_through_builder_write_parallel() -> None:
    # patches.write_on_every_core widens it from N - 1 processes to N.
    parameters = inspect.signature(Builder._write_parallel).parameters
    assert list(parameters)[:3] == ["self", "docnames", "nproc"]


def test_sphinx_still_reads_and_writes_through_serial_and_parallel_builder_methods() -> None:
    # patches.write_on_every_core reads and writes a few pages in the build's own process
    # (Builder._read_serial, Builder._write_serial) instead of forking workers for them.
    assert list(inspect.signature(Builder._read_parallel).parameters)[:3] == [
        "self",
        "docnames",
        "nproc",
    ]
    for name in ("_read_serial", "_write_serial"):
        assert list(inspect.signature(getattr(Builder, name)).parameters)[:2] == [
            "self",
            "docnames",
        ], name
    source = inspect.getsource(Builder.read)
    assert "self._read_parallel(" in source
    assert "self._read_serial(" in source


def test_sphinx_build_still_reports_every_exception_through_handle_exception() -> None:
    # errors.report_own_errors wraps sphinx._cli.util.errors.handle_exception, which
    # sphinx.cmd.build.build_main looks up on that module for any exception of a build.
    import sphinx._cli.util.errors as sphinx_errors
    from sphinx.cmd.build import build_main

    assert "sphinx._cli.util.errors.handle_exception(" in inspect.getsource(build_main)
    assert list(inspect.signature(sphinx_errors.handle_exception).parameters)[:2] == [
        "exception",
        "stderr",
    ]


def test_jupyter_client_still_writes_the_connection_file_the_manager_names() -> None:
    # kernels.ForkingProvisioner.pre_launch names the connection file (in the build's own
    # folder) before LocalProvisioner.pre_launch writes it.
    from jupyter_client.provisioning import LocalProvisioner

    assert "km.write_connection_file(" in inspect.getsource(LocalProvisioner.pre_launch)
    assert KernelManager.class_traits()["connection_file"].default_value == ""


def test_jupyter_client_still_has_the_transport_encryption_trait() -> None:
    # patches.encrypt_kernel_transport changes its default (MyST-NB has no setting for it).
    trait = KernelManager.class_traits().get("transport_encryption")
    assert trait is not None
    assert "auto" in trait.values


def test_jupyter_cache_still_adds_and_trims_in_cache_notebook_bundle() -> None:
    # cache.integrity.lock_cache_writes makes the addition and its trim one step under a lock.
    source = inspect.getsource(JupyterCacheBase.cache_notebook_bundle)
    assert "self.truncate_caches()" in source


def test_jupyter_cache_still_commits_an_entrys_record_before_writing_its_notebook() -> None:
    # cache.integrity.lock_cache_writes seals each notebook with its digest once written, and drops
    # on lookup an entry without one: the record alone does not say the notebook is whole.
    source = inspect.getsource(JupyterCacheBase.cache_notebook_bundle)
    assert source.index("NbCacheRecord.create_record(") < source.index("path.write_text(")
    lookup = inspect.getsource(JupyterCacheBase.merge_match_into_notebook)
    assert "self.match_cache_notebook(nb)" in lookup  # the lookup the patch checks
    for name in ("_get_notebook_path_cache", "create_hashed_notebook"):
        assert callable(getattr(JupyterCacheBase, name)), name
    from jupyter_cache.cache.db import NbCacheRecord

    assert list(inspect.signature(NbCacheRecord.remove_records).parameters) == ["pks", "db"]


def test_jupyter_cache_still_merges_cached_outputs_into_a_notebook() -> None:
    # cache.write_cached_outputs gives jupyter_execute/<page>.ipynb its outputs from the cache.
    parameters = inspect.signature(JupyterCacheBase.merge_match_into_notebook).parameters
    assert list(parameters)[:2] == ["self", "nb"]


def test_myst_nb_still_parses_in_parser_parse_and_holds_its_renderer_on_the_document() -> None:
    # execution.Parser subclasses it; after a dead kernel it removes the renderer MyST-NB left.
    assert issubclass(execution.Parser, MystNbParser)
    assert list(inspect.signature(MystNbParser.parse).parameters) == [
        "self",
        "inputstring",
        "document",
    ]
    assert '"nb_renderer"' in inspect.getsource(MystNbParser.parse)


def test_jupyter_cache_still_hashes_the_kernelspec_with_the_cells() -> None:
    # Each page's key rides in its kernelspec (execution.with_key).
    default = inspect.signature(JupyterCacheBase.create_hashed_notebook).parameters["nb_metadata"]
    assert "kernelspec" in default.default


def test_myst_nb_still_writes_each_pages_glue_data_beside_its_notebook() -> None:
    # variants.glue_file reads <output folder>/<page>.glue.json for the claims page.
    source = inspect.getsource(MystNbParser.parse)
    assert '".glue.json"' in source
    assert "nb_client.glue_data" in source


def test_sphinx_still_ends_readers_by_sigterm_and_nbclient_still_survives_it() -> None:
    # runner._end_workers_of_a_failed_build kills the reader that reads on after Sphinx's SIGTERM.
    from nbclient import NotebookClient
    from sphinx.util.parallel import ParallelTasks

    assert ".terminate()" in inspect.getsource(ParallelTasks.terminate)
    setup = inspect.getsource(NotebookClient.async_setup_kernel)
    assert "add_signal_handler(signal.SIGTERM" in setup


def test_jupyter_client_still_picks_a_tcp_port_by_binding_port_0_and_closing_it() -> None:
    # kernels.ForkingProvisioner.pre_launch gives the book's kernels Unix sockets instead: a port
    # picked so is free until the kernel binds it, and another process may take it first.
    from jupyter_client.connect import LocalPortCache

    source = inspect.getsource(LocalPortCache.find_available_port)
    assert ".bind((ip, 0))" in source
    assert source.index(".close()") < source.index("return port")


def test_torch_still_decides_cuda_autocast_on_fake_cuda_tensors() -> None:
    # amp_lesson.autocast.cuda_autocast_dtype asks the dispatcher what CUDA autocast does by
    # switching it on with set_autocast_enabled("cuda", True) over FakeTensorMode tensors on
    # device "cuda". If torch stops dispatching autocast for fake CUDA tensors this way, every
    # op would come back in its input dtype: linear would say float32.
    import torch
    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensorMode

    from amp_lesson.autocast import cuda_autocast_dtype

    assert callable(torch.set_autocast_enabled)
    assert callable(torch.set_autocast_dtype)
    with FakeTensorMode():
        assert torch.empty(2, 2, device="cuda").device.type == "cuda"
    x = torch.ones(8, 16)
    assert cuda_autocast_dtype(F.linear, x, torch.ones(4, 16)).dtype == "float16"
    assert cuda_autocast_dtype(torch.exp, x.half()).dtype == "float32"


def test_sphinx_still_makes_glossary_ids_with_make_id() -> None:
    # targets.titles_and_labels links a notebook's {term} roles to the glossary entry's anchor,
    # computed as Sphinx's glossary computes it (sphinx.util.nodes._make_id, a private name).
    from sphinx.domains.std import make_glossary_term
    from sphinx.util.nodes import _make_id

    assert "make_id(" in inspect.getsource(make_glossary_term)
    assert _make_id("term-loss scale") == "term-loss-scale"
    assert _make_id("term-FP16") == "term-FP16"


def test_a_failed_builds_cleanup_leaves_a_managers_server_to_the_extension_that_owns_it() -> None:
    """sphinx-sitemap keeps its pages in a ``multiprocessing.Manager()`` queue and reads it at
    ``build-finished``: killing that server made a failed build end in "Connection refused"
    from the sitemap, not with the page that failed. A plain child process is still ended."""
    import multiprocessing
    import time

    from amp_book import shutdown

    manager = multiprocessing.Manager()
    queue = manager.Queue()
    queue.put("page.html")
    worker = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,))
    worker.start()
    try:
        ended = shutdown.end_workers()
        assert ended == [worker.pid]
        assert not worker.is_alive()
        assert queue.get_nowait() == "page.html"  # the manager still serves
    finally:
        manager.shutdown()


def test_ipykernel_still_records_a_shutdown_request_in_shutdown_message() -> None:
    # The build's kernel startup file (execution.STARTUP) drops the ENOTSOCK error tornado logs
    # when IOPub closes under the control thread's last flush, only once this is set.
    from ipykernel.kernelbase import Kernel

    assert Kernel._shutdown_message is None
    assert "self._shutdown_message = " in inspect.getsource(Kernel.shutdown_request)


def _logged(logger: logging.Logger, error: BaseException | None) -> bool:
    """Whether ``logger`` lets through an error record carrying ``error``."""
    exc_info = (type(error), error, None) if error is not None else None
    record = logger.makeRecord(logger.name, logging.ERROR, __file__, 0, "callback", (), exc_info)
    return bool(logger.filter(record))


def test_the_kernel_startup_file_drops_only_the_shutdown_race(monkeypatch) -> None:
    import zmq

    for name in ("JPY_PARENT_PID", execution.RECORDS_ENV):
        monkeypatch.delenv(name, raising=False)
    kernel = types.SimpleNamespace(_shutdown_message=None)
    monkeypatch.setattr(
        builtins, "get_ipython", lambda: types.SimpleNamespace(kernel=kernel), raising=False
    )
    loggers = [logging.getLogger(n) for n in ("tornado.general", "tornado.application")]
    before = [list(logger.filters) for logger in loggers]
    try:
        exec(execution.STARTUP, {})  # noqa: S102 (the file every kernel of the build runs)
        closed = zmq.ZMQError(zmq.ENOTSOCK)
        for logger in loggers:
            assert _logged(logger, closed)  # a running kernel's closed socket is reported
            kernel._shutdown_message = {"msg_type": "shutdown_reply"}
            assert not _logged(logger, closed)
            assert _logged(logger, zmq.ZMQError(zmq.EAGAIN))
            assert _logged(logger, ValueError("a callback's own error"))
            assert _logged(logger, None)
            kernel._shutdown_message = None
    finally:
        for logger, filters in zip(loggers, before, strict=True):
            logger.filters[:] = filters


def test_jupyter_client_still_keeps_one_provisioner_factory_with_a_default_name() -> None:
    # kernels.use_provisioner sets the default provisioner of the factory jupyter_client made
    # (a traitlets singleton), which read JUPYTER_DEFAULT_PROVISIONER_NAME once.
    from jupyter_client.provisioning.factory import KernelProvisionerFactory

    assert callable(KernelProvisionerFactory.initialized)
    assert callable(KernelProvisionerFactory.instance)
    assert "default_provisioner_name" in KernelProvisionerFactory.class_traits()
    source = inspect.getsource(KernelProvisionerFactory)
    assert "JUPYTER_DEFAULT_PROVISIONER_NAME" in source


def test_myst_nb_still_reads_its_output_folder_from_env_mystnb_config() -> None:
    # cache.use_own_output_folder replaces env.mystnb_config with a copy whose
    # output_folder is the build's own (NbParserConfig.copy, at builder-inited).
    from myst_nb.core.config import NbParserConfig
    from myst_nb.sphinx_ext import sphinx_setup

    assert "output_folder" in {f.name for f in dataclasses.fields(NbParserConfig)}
    assert callable(NbParserConfig.copy)
    assert "mystnb_config" in inspect.getsource(sphinx_setup)


def test_myst_nb_still_writes_a_hidden_cell_with_visit_and_depart_hide_cell_input() -> None:
    # theme._hidden_cell_summary_named_by_its_text wraps visit_HideCellInput and drops the
    # aria-label it writes on the <summary>.
    from myst_nb.sphinx_ import HideCodeCellNode, depart_HideCellInput, visit_HideCellInput

    assert issubclass(HideCodeCellNode, docutils_nodes.Element)
    assert "<summary aria-label=" in inspect.getsource(visit_HideCellInput)
    assert callable(depart_HideCellInput)


def test_docutils_nodes_still_hold_their_document_in_node_document() -> None:
    # provenance._detach_foreign_documents deletes a node's _document where it is another
    # doctree's; the `document` property then finds it through the node's parent.
    source = inspect.getsource(docutils_nodes.Node)
    assert "self._document" in source
    assert "def document(self)" in source


def test_atexit_still_runs_its_handlers_through_run_exitfuncs() -> None:
    # tools/run_sphinx.py and the kernel server run the exit handlers, then end the process
    # with os._exit, skipping only the interpreter's teardown.
    import atexit

    assert callable(atexit._run_exitfuncs)


def test_sphinx_autobuild_still_has_its_server_injector_and_filter() -> None:
    # amp_book.preview builds its app from sphinx-autobuild's parts (2025.8.25), with its own
    # change callback in place of the one that starts `python -m sphinx`.
    from sphinx_autobuild.filter import IgnoreFilter
    from sphinx_autobuild.middleware import JavascriptInjectorMiddleware
    from sphinx_autobuild.server import RebuildServer

    assert list(inspect.signature(RebuildServer).parameters) == [
        "paths",
        "ignore_filter",
        "change_callback",
    ]
    watch = inspect.getsource(RebuildServer.watch)
    assert "self.change_callback, changed_paths=" in watch
    assert "ProcessPoolExecutor" in watch  # each rebuild in a process forked from the server
    assert list(inspect.signature(IgnoreFilter).parameters) == ["regular", "regex_based"]
    assert "ws_url" in inspect.signature(JavascriptInjectorMiddleware).parameters

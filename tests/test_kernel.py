"""The chapters' kernel talks to papermill over Unix sockets, not unencrypted TCP."""
import nbformat
import pytest

from specdec import book

pytestmark = pytest.mark.book


def test_kernel_runs_over_ipc_without_the_tcp_warning(tmp_path, capfd):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "language": "python",
                                 "display_name": "Python 3"}
    nb.cells = [
        nbformat.v4.new_code_cell("mode = 'replay'", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("import json, ipykernel.connect as c\n"
                                  "print(json.load(open(c.get_connection_file()))['transport'])"),
    ]
    src = tmp_path / "tiny.ipynb"
    nbformat.write(nb, src)
    out = book.execute_notebook(src, tmp_path / "out", {"mode": "replay"})
    assert nbformat.read(out, as_version=4).cells[-1].outputs[0]["text"] == "ipc\n"
    # the kernel inherits this process's stderr, where ipykernel logs its warning
    assert "without encryption" not in capfd.readouterr().err

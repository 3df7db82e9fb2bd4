"""plots: every figure type renders, carries its labels, and survives empty input."""
import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from specdec import metrics, plots, theory
from test_metrics import cell, load  # synthetic rows through the real store


@pytest.fixture
def speedups(tmp_path):
    spec = dict(drafts=10, draft_tokens=30, accepted=18, per_pos=[9, 6, 3])
    rows = []
    for b in (1, 4):
        rows += cell("baseline", 0, [100 * b] * 3, batch=b)
        for k in (1, 3):
            rows += cell("ngram", k, [120 * b, 125 * b, 130 * b], batch=b, **spec)
            rows += cell("draft-self", k, [80 * b, 100 * b, 90 * b], batch=b, **spec)  # unstable
    rows += cell("baseline", 0, [100] * 3, workload="code")
    rows += cell("ngram", 3, [140] * 3, workload="code", **spec)
    return metrics.with_speedup(metrics.summarize(load(rows, tmp_path)))


def texts(fig):
    ax = fig.axes[0]
    out = [t.get_text() for t in ax.texts] + [fig._suptitle.get_text(), ax.get_title(loc="left")]
    legend = ax.get_legend()
    if legend is not None:
        out += [t.get_text() for t in legend.get_texts()]
    return out


def rendered(fig, tmp_path, name):
    path = tmp_path / f"{name}.png"
    fig.savefig(path)
    return path.stat().st_size > 0


def test_speedup_vs_k(speedups, tmp_path):
    d = speedups[(speedups["batch_size"] == 1) & (speedups["workload"] == "chat")]
    fig = plots.speedup_vs_k(d)
    ax = fig.axes[0]
    assert isinstance(fig, Figure)
    assert ax.get_xlabel() == plots.K_LABEL and ax.get_ylabel() == plots.SPEEDUP_LABEL
    labels = texts(fig)
    assert {"ngram", "draft-self", "baseline (1×)", "unstable (CV above threshold)"} <= set(labels)
    assert any("unit-test" in t and "test-device" in t for t in labels)  # caption
    assert rendered(fig, tmp_path, "k")


def test_batch_and_throughput(speedups, tmp_path):
    d = speedups[speedups["workload"] == "chat"]
    fig = plots.speedup_vs_batch(d[d["num_speculative_tokens"].isin([0, 3])])
    assert fig.axes[0].get_xlabel() == plots.BATCH_LABEL
    assert fig.axes[0].get_xscale() == "log"
    fig = plots.throughput_vs_batch(d)
    assert "tokens/s" in fig.axes[0].get_ylabel()
    assert "baseline" in " ".join(texts(fig))  # the baseline's own line is drawn here
    # K varies inside this data, so it appears in the line labels
    assert any("K=3" in t for t in texts(fig))
    assert rendered(fig, tmp_path, "batch")


def test_acceptance_plots(speedups, tmp_path):
    fig = plots.acceptance_vs_k(speedups[speedups["batch_size"] == 1])
    assert "%" in fig.axes[0].get_ylabel()
    ys = np.concatenate([ln.get_ydata() for ln in fig.axes[0].lines])
    assert np.allclose(ys, 60.0)  # 18/30 accepted, in percent
    fig = plots.acceptance_vs_k(speedups, y="mean_acceptance_length")
    assert "tokens per target step" in fig.axes[0].get_ylabel()
    with pytest.raises(ValueError, match="y must be"):
        plots.acceptance_vs_k(speedups, y="nope")
    d = speedups[(speedups["method"] == "ngram") & (speedups["batch_size"] == 1)
                 & (speedups["num_speculative_tokens"] == 3) & (speedups["workload"] == "chat")]
    fig = plots.acceptance_per_position(d)
    line = fig.axes[0].lines[0]
    assert list(line.get_xdata()) == [1, 2, 3]
    assert np.allclose(line.get_ydata(), [90.0, 60.0, 30.0])
    assert rendered(fig, tmp_path, "pos")


def test_method_comparison(speedups, tmp_path):
    d = speedups[(speedups["batch_size"] == 1) & (speedups["num_speculative_tokens"].isin([0, 3]))]
    fig = plots.method_comparison(d)
    ax = fig.axes[0]
    assert ax.get_ylabel() == plots.SPEEDUP_LABEL
    assert [t.get_text() for t in ax.get_xticklabels()] == ["chat", "code"]
    assert len(ax.patches) == 3  # ngram on chat and code, draft-self on chat
    assert rendered(fig, tmp_path, "methods")


def test_method_comparison_orders_batches_by_number():
    rows = pd.DataFrame([{"method": "eagle3", "workload": "repeat", "batch_size": b, "speedup": 2.0,
                          "speedup_ci_low": 1.9, "speedup_ci_high": 2.1} for b in (16, 4, 64, 1)])
    ax = plots.method_comparison(rows).axes[0]
    labels = [t.get_text().replace("\n", " ") for t in ax.get_xticklabels()]
    assert [int(t.split("=")[1].rstrip(")")) for t in labels] == [1, 4, 16, 64], labels


def test_theory_vs_measured_and_what_if(speedups, tmp_path):
    spec = speedups[speedups["method"] != "baseline"]
    res = theory.fit(speedups, speedups["num_speculative_tokens"] == 1)
    fig = plots.theory_vs_measured(res.predictions)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "measured speedup (×)" and "model" in ax.get_ylabel()
    assert "held-out error" in ax.get_title(loc="left")
    assert len(spec) == len(res.predictions)
    w = theory.what_if(0.1, ks=(1, 3, 5))
    refs = pd.DataFrame({"label": ["C12 (K=5)"], "value": [0.68], "speedup": [2.1]})
    fig = plots.what_if_acceptance(w, reference_points=refs)
    labels = texts(fig)
    assert "article's claim: C12 (K=5)" in labels and "article's claimed speedup" in labels
    assert {"K=1", "K=3", "K=5"} <= set(labels)
    assert "α" in fig.axes[0].get_xlabel()
    fig = plots.what_if_acceptance(w, reference_points={"C7": 0.68}, x="acceptance_rate")
    assert "article's claim: C7" in texts(fig)
    assert rendered(fig, tmp_path, "whatif")


@pytest.mark.parametrize("fn", [plots.speedup_vs_k, plots.acceptance_vs_k, plots.speedup_vs_batch,
                                plots.throughput_vs_batch, plots.method_comparison,
                                plots.acceptance_per_position, plots.theory_vs_measured,
                                plots.what_if_acceptance, plots.acceptance_vs_temperature])
def test_empty_input_says_no_data(fn, tmp_path):
    from specdec import store
    no_rows = metrics.with_speedup(metrics.summarize(store.RUNS_SCHEMA.empty_table().to_pandas(use_threads=False)))
    for empty in (pd.DataFrame(), None, no_rows):
        fig = fn(empty)
        assert isinstance(fig, Figure)
        assert "no data" in [t.get_text() for t in fig.axes[0].texts]
        assert fig.axes[0].get_xlabel() and fig.axes[0].get_ylabel()
        assert rendered(fig, tmp_path, fn.__name__)


def test_acceptance_vs_temperature(tmp_path):
    spec = dict(drafts=10, draft_tokens=30)
    rows = []
    for t, acc in ((0.0, 18), (1.0, 6)):
        rows += cell("baseline", 0, [100] * 3, temperature=t)
        rows += cell("ngram", 3, [120] * 3, temperature=t, accepted=acc, **spec)
    summ = metrics.summarize(load(rows, tmp_path))
    fig = plots.acceptance_vs_temperature(summ)
    line = fig.axes[0].lines[0]
    assert list(line.get_xdata()) == [0.0, 1.0]
    assert np.allclose(line.get_ydata(), [60.0, 20.0])  # 18/30 and 6/30, in percent
    assert fig.axes[0].get_xlabel() == "sampling temperature"
    assert rendered(fig, tmp_path, "temperature")


def test_verdict_counts_keeps_order_and_zeros(tmp_path):
    ledger = pd.DataFrame({"verdict": ["reproduced", "contradicted", "contradicted"],
                           "kind": ["api", "numeric", "api"]})
    fig = plots.verdict_counts(ledger, ["reproduced", "contradicted", "pending"], ["api", "numeric"])
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["reproduced", "contradicted", "pending"]
    assert [t.get_text() for t in ax.texts] == ["1", "2", "0"]
    assert "3 in all" in ax.get_xlabel()
    assert rendered(fig, tmp_path, "verdicts")
    # the longest bar's label lies inside the axes, not under the legend beside them
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    axes_box = ax.get_window_extent(renderer)
    assert all(t.get_window_extent(renderer).x1 <= axes_box.x1 for t in ax.texts)


@pytest.mark.parametrize("empty", [None, pd.DataFrame(), pd.DataFrame({"verdict": [], "kind": []})])
def test_verdict_counts_without_claims_says_no_data(empty, tmp_path):
    fig = plots.verdict_counts(empty, ["reproduced", "contradicted"], ["api", "numeric"])
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.texts] == ["no data"]
    assert "0 in all" in ax.get_xlabel()
    assert rendered(fig, tmp_path, "verdicts-empty")


def test_a_methods_spread_between_panels_is_drawn_beside_its_interval(speedups):
    """The methods whose control panel moved between leases carry that spread in the figures
    (issue 19): a band around the line, a pale bar beside the interval; the others nothing."""
    d = speedups[(speedups["workload"] == "chat") & speedups["num_speculative_tokens"].isin([0, 3])]
    plain = plots.speedup_vs_batch(d)
    shaded = plots.speedup_vs_batch(d, spread={"ngram": 0.5, "absent": 1.0})
    assert len(shaded.axes[0].collections) > len(plain.axes[0].collections)
    assert any(t.startswith("ngram: spread between control panels (±25%)") for t in texts(shaded))
    assert not any("draft-self: spread" in t for t in texts(shaded))
    one = d[d["batch_size"] == 1]
    bars = plots.method_comparison(one, spread={"draft-self": 0.2})
    assert any(t.startswith("draft-self: spread between control panels (±10%)") for t in texts(bars))
    assert not any("spread" in t for t in texts(plots.method_comparison(one)))


def test_palette_is_consistent_and_distinct():
    a = plots.method_palette(["ngram", "eagle-llama", "baseline"])
    b = plots.method_palette(["eagle-llama", "suffix"])
    assert a["eagle-llama"] == b["eagle-llama"]
    assert a["baseline"] == (0.45, 0.45, 0.45)
    many = plots.method_palette([f"m{i}" for i in range(15)] + ["ngram"])
    assert len(set(many.values())) == len(many)


def test_throughput_rings_only_the_cells_own_instability(speedups):
    d = speedups[(speedups["workload"] == "chat") & (speedups["method"] != "draft-self")]
    fig = plots.throughput_vs_batch(d.assign(baseline_unstable=True))
    assert "unstable (CV above threshold)" in texts(fig)  # ngram's own CV is 4 %
    stable = d.assign(unstable=False, baseline_unstable=True)
    assert "unstable (CV above threshold)" not in texts(plots.throughput_vs_batch(stable))
    assert "unstable (CV above threshold)" in texts(plots.speedup_vs_batch(stable))

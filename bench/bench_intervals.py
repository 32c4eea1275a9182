"""The coverage simulation behind the benchmark's choice of interval: each 95 % interval of
a mean (Student's t, scipy's BCa bootstrap, a studentised bootstrap) over 2000 samples of
n = 3, 5, 8, 20 from a normal and a lognormal population; the share that holds the true
mean. `xai_core.metrics.statistics.SIMULATED_COVERAGE` records these figures (a row's
note says whether they still agree)."""

from __future__ import annotations

from xai_core.metrics import statistics as stats


def run() -> list[dict]:
    found = stats.coverage_simulation()
    rows = []
    for method, populations in found.items():
        for population, cells in populations.items():
            for n, share in cells.items():
                recorded = stats.SIMULATED_COVERAGE.get(method, {}).get(population, {}).get(n)
                note = "target >= 93 %" if population == "normal" else ""
                if recorded != share:
                    note += " (NOT the recorded figure: update SIMULATED_COVERAGE)"
                rows.append({"name": f"coverage, {method}, {population}, n = {n}",
                             "value": 100 * share, "unit": "%", "note": note.strip()})
    return rows


if __name__ == "__main__":
    for row in run():
        print(f"{row['name']:40} {row['value']:6.2f} {row['unit']} {row['note']}")

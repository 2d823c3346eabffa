"""Reports users can show their team: one self-contained HTML page with the inputs, the top-k
table, time and memory breakdowns, a TP x PP map, a scaling curve and predicted vs measured runs
(``collect`` computes, ``write_report`` draws and writes), plus the what-if plot."""
from perfmodel.report.build import ReportFiles, write_report
from perfmodel.report.data import ReportData, collect

__all__ = ["collect", "write_report", "ReportData", "ReportFiles"]

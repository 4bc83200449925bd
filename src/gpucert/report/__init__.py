"""Run output: verdict.json, the HTML summary, Allure results, plots, attestation."""

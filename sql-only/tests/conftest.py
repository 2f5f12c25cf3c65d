"""The edition's own tests import helpers from tests/, whose modules carry its marks."""


def pytest_configure(config):
    config.addinivalue_line("markers", "library(reason=...): see tests/conftest.py")

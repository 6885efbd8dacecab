"""Only the package list, which pyproject.toml cannot write: the packages of src/ and conf/ as
linarena.conf (see [tool.setuptools] there)."""

from setuptools import find_packages, setup

setup(packages=[*find_packages("src"), "linarena.conf"])

"""The fixtures of Triton's tests/conftest.py that these tests use, for a machine with
neither vLLM nor TensorRT-LLM: Triton's would look for them and give up."""

import pytest


@pytest.fixture(scope="session")
def backend():
    return None


@pytest.fixture(scope="session")
def model():
    return "mock_llm"


@pytest.fixture(scope="session")
def tokenizer_model():
    return ""


@pytest.fixture(scope="session")
def model_repository():
    from pathlib import Path

    return str(Path(__file__).parent / "test_models")

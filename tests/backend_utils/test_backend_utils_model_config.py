"""ModelConfig for auto_complete_config, with Triton's ValueError conditions."""

import json

import pytest

import backend_utils as pb


def config(**fields):
    base = {"name": "m", "max_batch_size": 0, "input": [], "output": []}
    base.update(fields)
    return pb.ModelConfig(json.dumps(base))


def test_as_dict_is_the_live_config():
    cfg = config()
    cfg.as_dict()["x"] = 1
    assert cfg.as_dict()["x"] == 1


def test_set_max_batch_size_only_raises():
    cfg = config(max_batch_size=4)
    cfg.set_max_batch_size(8)
    assert cfg.as_dict()["max_batch_size"] == 8
    with pytest.raises(ValueError, match="configuration specified max_batch_size 8"):
        cfg.set_max_batch_size(2)


def test_set_dynamic_batching_unless_another_scheduler():
    cfg = config()
    cfg.set_dynamic_batching()
    cfg.as_dict()["dynamic_batching"]["max_queue_delay_microseconds"] = 5
    cfg.set_dynamic_batching()  # already there: kept as is
    assert cfg.as_dict()["dynamic_batching"] == {"max_queue_delay_microseconds": 5}
    for scheduler in ("sequence_batching", "ensemble_scheduling"):
        with pytest.raises(ValueError, match=f"scheduling_choice as '{scheduler}'"):
            config(**{scheduler: {}}).set_dynamic_batching()


def test_add_input_appends_and_completes_same_named_inputs():
    cfg = config(input=[{"name": "A", "data_type": "TYPE_INVALID", "dims": []}])
    cfg.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [4], "optional": True})
    cfg.add_input({"name": "B", "data_type": "TYPE_INT32", "dims": [-1]})
    assert cfg.as_dict()["input"] == [
        {"name": "A", "data_type": "TYPE_FP32", "dims": [4], "optional": True},
        {"name": "B", "data_type": "TYPE_INT32", "dims": [-1]},
    ]


@pytest.mark.parametrize(
    ("existing", "new", "message"),
    [
        ({"name": "A", "data_type": "TYPE_FP32", "dims": [4]},
         {"name": "A", "data_type": "TYPE_INT8", "dims": [4]}, "configuration expects datatype TYPE_FP32"),
        ({"name": "A", "data_type": "TYPE_FP32", "dims": [4]},
         {"name": "A", "data_type": "TYPE_FP32", "dims": [5]}, "the model expects dims"),
        ({"name": "A", "data_type": "TYPE_FP32", "dims": [4], "optional": False},
         {"name": "A", "data_type": "TYPE_FP32", "dims": [4], "optional": True}, "expects optional True"),
    ],
)
def test_add_input_conflicts_raise(existing, new, message):
    with pytest.raises(ValueError, match=message):
        config(input=[existing]).add_input(new)


@pytest.mark.parametrize(
    ("tensor", "message"),
    [
        ({"name": "A", "data_type": "TYPE_FP32", "dims": [1], "shape": [1]}, "contains property other than 'name', 'data_type', 'dims' and 'optional'."),
        ({"data_type": "TYPE_FP32", "dims": [1]}, "is missing 'name' property."),
        ({"name": "A", "dims": [1]}, "input 'A' in auto-complete-config function for model 'm' is missing 'data_type' property."),
        ({"name": "A", "data_type": "TYPE_FP32"}, "is missing 'dims' property."),
    ],
)
def test_add_input_validates_properties(tensor, message):
    with pytest.raises(ValueError, match=message):
        config().add_input(tensor)


def test_add_output_has_no_optional():
    cfg = config()
    cfg.add_output({"name": "O", "data_type": "TYPE_FP32", "dims": [2]})
    assert cfg.as_dict()["output"] == [{"name": "O", "data_type": "TYPE_FP32", "dims": [2]}]
    with pytest.raises(ValueError, match="other than 'name', 'data_type' and 'dims'."):
        cfg.add_output({"name": "O", "data_type": "TYPE_FP32", "dims": [2], "optional": True})
    with pytest.raises(ValueError, match="for output 'O'"):
        cfg.add_output({"name": "O", "data_type": "TYPE_INT8", "dims": [2]})


def test_add_input_works_when_config_lists_no_inputs():
    cfg = pb.ModelConfig('{"name": "m"}')
    cfg.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [1]})
    assert cfg.as_dict()["input"][0]["name"] == "A"


def test_set_model_transaction_policy():
    cfg = config()
    cfg.set_model_transaction_policy({"decoupled": True})
    assert pb.using_decoupled_model_transaction_policy(cfg.as_dict()) is True
    cfg.set_model_transaction_policy({"decoupled": True})
    with pytest.raises(ValueError, match="trying to change decoupled property"):
        cfg.set_model_transaction_policy({"decoupled": False})
    with pytest.raises(ValueError, match="contains property other than 'decoupled'"):
        cfg.set_model_transaction_policy({"sequence": True})

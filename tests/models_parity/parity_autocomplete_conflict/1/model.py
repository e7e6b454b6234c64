"""auto_complete_config contradicts config.pbtxt: the load fails with Triton's error."""


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.add_input(
            {"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [4]})
        return auto_complete_model_config

    def execute(self, requests):
        raise AssertionError("never loaded")

"""Triton's credential sources for cloud model repositories, as fsspec storage options.

`TRITON_CLOUD_CREDENTIAL_PATH` names a JSON file with one section per provider ("s3",
"gs", "as"), each mapping a path prefix ("" matches every path) to a credential; the
longest prefix a repository's path starts with wins. Without the file each library
reads its provider's own environment (AWS_ACCESS_KEY_ID, AWS_PROFILE, ... for s3fs;
GOOGLE_APPLICATION_CREDENTIALS for gcsfs; Triton's AZURE_STORAGE_ACCOUNT /
AZURE_STORAGE_KEY / AZURE_STORAGE_AUTH_TYPE for Azure, mapped here).

Nothing here logs or puts a credential into an error message.
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

CREDENTIAL_PATH_ENV = "TRITON_CLOUD_CREDENTIAL_PATH"


def storage_options(scheme: str, url: str, account: str = "",
                    env: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The fsspec options for repository `url` of `scheme` ("s3", "gs", "as");
    `account`: an Azure URL's account name."""
    path = env.get(CREDENTIAL_PATH_ENV)
    if path:
        credential = _from_file(path, scheme, url)
        if credential is not None:
            return _OPTIONS[scheme](credential, account, env)
    return _ENV_OPTIONS[scheme](account, env)


def _from_file(path: str, scheme: str, url: str) -> Any:
    """The credential of the longest prefix of `url` in the file's `scheme` section."""
    try:
        with open(path) as f:
            section = json.load(f).get(scheme, {})
    except (OSError, ValueError, AttributeError) as exc:
        raise ValueError(f"{CREDENTIAL_PATH_ENV}: cannot read the credential file "
                         f"'{path}': {type(exc).__name__}") from None
    matches = [prefix for prefix in section if url.startswith(prefix)]
    return section[max(matches, key=len)] if matches else None


def _s3(credential: Mapping[str, str], account: str, env: Mapping[str, str]
        ) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for name, option in (("key_id", "key"), ("secret_key", "secret"),
                         ("session_token", "token"), ("profile", "profile")):
        if credential.get(name):
            options[option] = credential[name]
    if credential.get("region"):
        options["client_kwargs"] = {"region_name": credential["region"]}
    return options


def _gs(credential: str, account: str, env: Mapping[str, str]) -> dict[str, Any]:
    return {"token": credential} if credential else {}


def _as(credential: Mapping[str, str], account: str, env: Mapping[str, str]
        ) -> dict[str, Any]:
    options: dict[str, Any] = {"account_name": credential.get("account_str") or account}
    auth = credential.get("auth_type", "")
    if auth:
        options["credential"] = _azure_credential(auth, credential.get("client_id", ""))
    elif credential.get("account_key"):
        options["account_key"] = credential["account_key"]
    return options


def _s3_env(account: str, env: Mapping[str, str]) -> dict[str, Any]:
    return {}  # botocore's chain: environment, then ~/.aws (as `aws configure` writes)


def _gs_env(account: str, env: Mapping[str, str]) -> dict[str, Any]:
    return {}  # gcsfs: GOOGLE_APPLICATION_CREDENTIALS, the attached account, anonymous


def _as_env(account: str, env: Mapping[str, str]) -> dict[str, Any]:
    options: dict[str, Any] = {"account_name": env.get("AZURE_STORAGE_ACCOUNT") or account}
    auth = env.get("AZURE_STORAGE_AUTH_TYPE", "")
    if auth:
        options["credential"] = _azure_credential(auth, env.get("AZURE_STORAGE_CLIENT_ID", ""))
    elif env.get("AZURE_STORAGE_KEY"):
        options["account_key"] = env["AZURE_STORAGE_KEY"]
    return options


def _azure_credential(auth_type: str, client_id: str) -> Any:
    """Triton's AZURE_STORAGE_AUTH_TYPE: "managed_identity" or "default"."""
    try:
        from azure.identity import DefaultAzureCredential, ManagedIdentityCredential
    except ImportError:
        raise ValueError(f"Azure authentication '{auth_type}' needs azure-identity: "
                         f"pip install azure-identity") from None
    if auth_type == "managed_identity":
        return ManagedIdentityCredential(client_id=client_id or None)
    if auth_type == "default":
        return DefaultAzureCredential()
    raise ValueError(f"unknown Azure authentication type '{auth_type}' (managed_identity "
                     f"or default)")


_OPTIONS = {"s3": _s3, "gs": _gs, "as": _as}
_ENV_OPTIONS = {"s3": _s3_env, "gs": _gs_env, "as": _as_env}

"""`init`'s key provider flags: which provider, and where its master key is.

Each flag sets one provider option (`--key-id` is aws-kms's `key_id`); `--key-option
NAME=VALUE` sets any option, for providers installed as plug-ins. The provider refuses an
option it does not take, naming the ones it does. `init` records the options in the home,
so no later command needs them. Credentials are never flags: each provider reads them from
its own standard configuration (AWS's environment or profile, a PKCS#11 PIN variable).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from toolkit_vault.keys.providers import provider_names

__all__ = ["key_options", "provider_flags"]

F = TypeVar("F", bound=Callable[..., Any])

# flag -> (option, help)
FLAGS = {
    "--key-id": ("key_id", "aws-kms: KMS key id, ARN or alias (default: create a key)."),
    "--region": ("region", "aws-kms: the key's region (default: AWS's own configuration)."),
    "--profile": ("profile", "aws-kms: a profile of ~/.aws/config."),
    "--endpoint-url": ("endpoint_url", "aws-kms: a KMS-compatible endpoint URL."),
    "--pkcs11-module": ("module", "pkcs11: the token's PKCS#11 library (.so)."),
    "--token-label": ("token_label", "pkcs11: the token's label."),
    "--key-label": ("key_label", "pkcs11: label of the master keys (default toolkit-vault)."),
    "--pin-env": ("pin_env", "pkcs11: variable holding the PIN (TOOLKIT_VAULT_PKCS11_PIN)."),
    "--pin-file": ("pin_file", "pkcs11: a 0600 file holding the PIN."),
    "--key-file": (
        "path",
        "file: the key document (default $TOOLKIT_VAULT_HOME/master-keys.json).",
    ),
}


def provider_flags(command: F) -> F:
    """Add `--key-provider`, one flag per known option and `--key-option` to a command."""
    for flag, (option, text) in reversed(FLAGS.items()):
        command = click.option(flag, option, default=None, metavar="VALUE", help=text)(command)
    command = click.option(
        "--key-option",
        "extra_options",
        multiple=True,
        metavar="NAME=VALUE",
        help="Any provider option (repeatable), for plug-in providers.",
    )(command)
    return click.option(
        "--key-provider",
        type=click.Choice(provider_names()),
        default=None,
        help="Where the master key lives (default: recorded in the home, else the OS keyring).",
    )(command)


def key_options(flags: dict[str, Any]) -> dict[str, str]:
    """The provider options the flags of `provider_flags` set (consumed from `flags`)."""
    options = {}
    for option, _ in FLAGS.values():
        value = flags.pop(option, None)
        if value is not None:
            options[option] = value
    for pair in flags.pop("extra_options", ()):
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{pair!r} is not NAME=VALUE", param_hint="--key-option")
        options[name] = value
    return options

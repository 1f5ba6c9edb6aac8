"""DeAR: fine-grained CLIP adaptation by decomposing attention head roles.

The library's public names (docs/api.md) are importable from here; they load
torch and open_clip on first use, so `import dear` (and the CLI) stays light.
"""

__version__ = "0.1.0"

__all__ = ["RoleSettings", "DeARModel", "load_clip", "head_roles", "role_masks", "encode_image", "attribute_tokens",
           "fuse_logits", "load_trained", "CORE_CONCEPTS"]


def __getattr__(name: str):
    if name in __all__:
        from dear import api

        return getattr(api, name)
    raise AttributeError(f"module 'dear' has no attribute {name!r}")

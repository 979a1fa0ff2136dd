"""Loading a committed adapter version onto a base model (peft): the storage room keeps the files,
this module turns them into a model."""

from __future__ import annotations

from typing import Any

from learnerd.store.adapters import AdapterVersion


def load_adapter(model: Any, version: AdapterVersion, *, trainable: bool = False) -> Any:
    """``peft.PeftModel.from_pretrained(model, version.path)``: ``version``'s adapter on the base ``model``
    (which must be the base the adapter was trained on; see ``metadata().base_model_identity``).

    Returns:
        the ``PeftModel`` (eval mode unless ``trainable``); ``disable_adapter()`` gives the base's view.
    """
    from peft import PeftModel

    peft_model = PeftModel.from_pretrained(model, str(version.path), is_trainable=trainable)
    return peft_model if trainable else peft_model.eval()

"""The AsyncAPI document covers every subject and every contract model."""

from __future__ import annotations

import json

from services.cli.asyncapi import build_document, catalog
from shared import contract as c
from shared.settings import Settings


def test_document_lists_every_subject_with_its_model() -> None:
    settings = Settings(subject_prefix="fp")
    document = build_document(settings)
    assert document["asyncapi"] == "3.0.0"
    channels = document["channels"]
    assert isinstance(channels, dict)
    addresses = {channel["address"] for channel in channels.values()}
    for channel in catalog(settings.subjects):
        assert channel.subject in addresses, channel.subject
    schemas = json.dumps(document["components"])
    event_types = [
        obj.__name__
        for obj in vars(c).values()
        if isinstance(obj, type) and issubclass(obj, c.Event) and obj not in (c.Event, c.ProvisionCommand)
    ]
    replies_only = {"OfferList", "ChargeList", "FleetSnapshot"} - {
        ch.model.__name__ for ch in catalog(settings.subjects)
    }
    for name in event_types:
        if name not in replies_only:
            assert f'"{name}"' in schemas, f"{name} missing from the AsyncAPI components"

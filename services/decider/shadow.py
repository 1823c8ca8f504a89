"""What a shadow run would have rented: the operator trying FleetPilot on a real account reads, in the audit,
which offers a withheld launch would have taken and what they cost an hour, not only "launch 3".

The offers are the provisioner's ranking at that moment (`<prefix>.provision.offers`, best expected $/task
first), the same ranking a launch takes its offers from; a launch sent later may find others.
"""

from __future__ import annotations

from shared.contract import LaunchInstances, OfferLine, OfferList, OfferQuery

SHOWN_OFFERS = 5  # the audit line stays readable (and within a verdict's 500 characters)


def offer_query(launch: LaunchInstances) -> OfferQuery:
    """The offers the launch may take: its GPU models and its price cap, as many as it rents."""
    return OfferQuery(
        occurred_at=launch.occurred_at,
        source=launch.source,
        gpu_models=list(launch.gpu_models),
        max_price_usd_per_h=launch.max_price_usd_per_h,
        limit=min(launch.count, 50),
    )


def would_rent(launch: LaunchInstances, offers: OfferList) -> str:
    """One line: the offers the launch would take now, and their price an hour in all."""
    if offers.error:
        return f"would rent {launch.count}: offers unknown ({offers.error[:120]})"
    taken = offers.offers[: launch.count]
    if not taken:
        return f"would rent {launch.count}: no offer matches now"
    shown = "; ".join(_offer(offer) for offer in taken[:SHOWN_OFFERS])
    more = f"; +{len(taken) - SHOWN_OFFERS} more" if len(taken) > SHOWN_OFFERS else ""
    short = f" (only {len(taken)} of {launch.count} match)" if len(taken) < launch.count else ""
    per_h = sum(offer.price_usd_per_h for offer in taken)
    return f"would rent {len(taken)}{short} at ${per_h:.2f}/h: {shown}{more}"


def _offer(offer: OfferLine) -> str:
    host = f" host {offer.host_id}" if offer.host_id is not None else ""
    return f"offer {offer.offer_id} {offer.gpu_model} x{offer.num_gpus} ${offer.price_usd_per_h:.2f}/h{host}"

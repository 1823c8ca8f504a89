"""fleet: every rented machine's life, from rent to gone, and the fleet snapshot."""

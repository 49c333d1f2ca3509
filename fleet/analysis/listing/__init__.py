"""Listed against found: mismatches, mixed listings, drift, duplicates, the fleet as found."""

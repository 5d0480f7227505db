"""Pure readings of recorded data (no I/O): robust statistics, the cold start taken apart, the ranks compared."""

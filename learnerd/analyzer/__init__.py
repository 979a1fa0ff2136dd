"""Log files → blocks (foyle TN005): watermarked tailing and one module per input format."""

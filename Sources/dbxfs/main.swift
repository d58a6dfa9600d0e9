print("dbxfs: not yet")

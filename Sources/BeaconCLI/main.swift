print("beacon: the command-line tool arrives with issue 3")

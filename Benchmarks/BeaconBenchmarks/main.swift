print("beacon-bench arrives with issue 3")

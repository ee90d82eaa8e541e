USERS = {1: "ada", 2: "grace"}


def get_usr(user_id):
    return USERS.get(user_id)
